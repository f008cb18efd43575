import type { Broadcast } from "../runtime/transport/broadcast.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { FairShares } from "./fair-shares.js";
import type { Logger } from "../runtime/observability/logger.js";
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
  /** Custom sources' tables and URLs; without them their routes answer Unavailable. */
  customSources?: CustomSourcesDeps;
  /** Each organization's share of this process's deliveries (INTAKE_ORG_IN_FLIGHT and the rest); none: no limit. */
  shares?: FairShares;
  /** How deliveries reach the incident core: in groups over NATS (record-groups.ts); by default one Record each. */
  recordCall?: RecordCall;
  /** Each organization's budget of bodies over 64 KiB (INTAKE_LARGE_BODY_BYTES_PER_SECOND); none: no budget. */
  largeBodyBudget?: LargeBodyBudget;
}
