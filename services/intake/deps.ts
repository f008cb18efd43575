import type { Broadcast } from "../runtime/transport/broadcast.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { FairShares } from "./fair-shares.js";
import type { Logger } from "../runtime/observability/logger.js";
import type { Sql } from "../runtime/data/database.js";
import type { Outbox } from "../runtime/data/outbox.js";
import type { CustomSourcesDeps } from "./custom-sources/custom-source-handlers.js";
import type { LargeBodyBudget } from "./large-body-budget.js";
import type { RecordCall } from "./record-groups.js";
import type { IntakeStore } from "./store.js";

/** What intake's handlers are built from (see "A service's files" in docs/ARCHITECTURE.md). */
export interface IntakeDeps {
  /** Identity resolves credentials, the incident core records, remote sources resolve connections. */
  clients: Clients;
  store: IntakeStore;
  logger: Logger;
  /** Carries identity's notice that an ingest token was replaced. */
  broadcast: Broadcast;
  /**
   * The tables of custom sources, grouping overrides, correlation and configuration as code (each
   * room's Postgres store is made over them in routes.ts), and what the custom-source routes need
   * besides; without them those routes answer Unavailable.
   */
  customSources?: Omit<CustomSourcesDeps, "store" | "outbox"> & { sql: Sql; outbox: Outbox };
  /** Each organization's share of this process's deliveries (INTAKE_ORG_IN_FLIGHT and the rest); none: no limit. */
  shares?: FairShares;
  /** How deliveries reach the incident core: in groups over NATS (record-groups.ts); by default one Record each. */
  recordCall?: RecordCall;
  /** Each organization's budget of bodies over 64 KiB (INTAKE_LARGE_BODY_BYTES_PER_SECOND); none: no budget. */
  largeBodyBudget?: LargeBodyBudget;
}
