import type { ServiceImpl } from "@connectrpc/connect";
import type { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import type { Clients } from "../runtime/clients.js";
import type { Sql } from "../runtime/database.js";
import type { IngestTokenResolver } from "../runtime/ingest-token-cache.js";
import type { Outbox } from "../runtime/outbox.js";
import { createHistoryHandlers } from "./history.js";
import type { Logger } from "../runtime/logger.js";
import { createPingHandler } from "./ping.js";
import { createRegistryHandlers } from "./registry.js";
import type { SilenceDelivery } from "./silence-delivery.js";
import type { HeartbeatStore } from "./store.js";
import type { Sweeper } from "./sweep.js";

/** Wires the handler groups into the service implementation. */
export function createHeartbeatsRoutes(deps: {
  sql: Sql;
  /** The pool pings use, apart from background work. */
  pingSql: Sql;
  store: HeartbeatStore;
  clients: Clients;
  outbox: Outbox;
  ingestTokens: IngestTokenResolver;
  delivery: SilenceDelivery;
  sweeper: Sweeper;
  logger: Logger;
}): ServiceImpl<typeof HeartbeatsService> {
  return {
    ...createRegistryHandlers(deps),
    ...createPingHandler({ ...deps, sql: deps.pingSql }),
    ...createHistoryHandlers(deps),
    // Internal: the periodic timer runs the same sweep.
    async sweep() {
      return deps.sweeper.sweep();
    },
  };
}
