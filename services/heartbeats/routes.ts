import type { ServiceImpl } from "@connectrpc/connect";
import type { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import type { HeartbeatsDeps } from "./deps.js";
import { createHistoryHandlers } from "./history.js";
import { createPingHandler } from "./ping/ping.js";
import { createProvisioner, createRegistryHandlers } from "./registry.js";

/** Wires the handler groups into the service implementation. */
export function createHeartbeatsRoutes(deps: HeartbeatsDeps): ServiceImpl<typeof HeartbeatsService> {
  return {
    ...createRegistryHandlers(deps),
    ...createPingHandler({ ...deps, sql: deps.pingSql, provision: createProvisioner(deps) }),
    ...createHistoryHandlers(deps),
    // Internal: the periodic timer runs the same sweep.
    async sweep() {
      return deps.sweeper.sweep();
    },
  };
}
