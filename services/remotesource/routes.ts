import type { ServiceImpl } from "@connectrpc/connect";
import type { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { createConnectionHandlers } from "./connections-handlers.js";
import type { RemoteSourceDeps } from "./deps.js";
import { createEvidenceHandlers } from "./evidence-handlers.js";
import { createInternalHandlers } from "./internal-handlers.js";
import { createInvestigationReadHandlers } from "./investigation-reads.js";
import { createReadHandlers } from "./read-handlers.js";
import { createTestHandlers } from "./test-handlers.js";

/**
 * Every RemoteSourcesService method: create, list, get, update, delete, test and read
 * connections, their investigation reads, an incident's evidence and re-run, and the internal
 * ResolveConnection.
 */
export function createRemoteSourcesRoutes(deps: RemoteSourceDeps & { pokeInvestigator(): void }): ServiceImpl<typeof RemoteSourcesService> {
  return {
    ...createInvestigationReadHandlers(deps),
    ...createEvidenceHandlers(deps),
    ...createConnectionHandlers(deps),
    ...createTestHandlers(deps),
    ...createReadHandlers(deps),
    ...createInternalHandlers(deps),
  };
}
