import type { Clients } from "../runtime/transport/clients.js";
import type { Sql } from "../runtime/data/database.js";
import type { IngestTokenResolver } from "../runtime/credentials/ingest-token-cache.js";
import type { Logger } from "../runtime/observability/logger.js";
import type { Outbox } from "../runtime/data/outbox.js";
import type { PingUrls } from "./registry.js";
import type { SilenceDelivery } from "./silence-delivery.js";
import type { HeartbeatStore } from "./store.js";
import type { Sweeper } from "./sweep.js";

/** What heartbeats' handlers are built from (see "A service's files" in docs/ARCHITECTURE.md). */
export interface HeartbeatsDeps {
  sql: Sql;
  /** The pool pings use, apart from background work. */
  pingSql: Sql;
  store: HeartbeatStore;
  clients: Clients;
  outbox: Outbox;
  ingestTokens: IngestTokenResolver;
  delivery: SilenceDelivery;
  sweeper: Sweeper;
  pingUrls: PingUrls;
  logger: Logger;
}
