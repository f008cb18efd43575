import type { ServiceImpl } from "@connectrpc/connect";
import type { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { createConnectionHandlers } from "./connections-handlers.js";
import type { RemoteSourceDeps } from "./deps.js";
import { createInternalHandlers } from "./internal-handlers.js";
import { createReadHandlers } from "./read-handlers.js";
import { createTestHandlers } from "./test-handlers.js";

/**
 * Every RemoteSourcesService method: create, list, get, update, delete, test and read
 * connections, and the internal ResolveConnection.
 */
export function createRemoteSourcesRoutes(deps: RemoteSourceDeps): ServiceImpl<typeof RemoteSourcesService> {
  return {
    ...createConnectionHandlers(deps),
    ...createTestHandlers(deps),
    ...createReadHandlers(deps),
    ...createInternalHandlers(deps),
  };
}
