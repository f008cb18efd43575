import type { ServiceContext } from "../runtime/service-module.js";
import type { createLoginThrottle } from "./login-throttle.js";

/** What the identity handler groups share; service.ts builds it once. */
export interface IdentityDeps extends Pick<ServiceContext, "sql" | "config" | "clients" | "outbox" | "broadcast"> {
  throttle: ReturnType<typeof createLoginThrottle>;
}
