import type { Sql } from "../runtime/data/database.js";
import type { ServiceContext } from "../runtime/service-module.js";

/** What the incident core's handler groups share; service.ts builds it once. */
export type IncidentsDeps = Pick<ServiceContext, "sql" | "config" | "clients" | "outbox" | "logger"> & {
  /** Record's and RecordMany's pool, whose statements keep their plans (service.ts). */
  deliverySql: Sql;
};
