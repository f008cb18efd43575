import type { ServiceContext } from "../runtime/service-module.js";

/** What the incident core's handler groups share; service.ts builds it once. */
export type IncidentsDeps = Pick<ServiceContext, "sql" | "config" | "clients" | "outbox">;
