import type { ServiceImpl } from "@connectrpc/connect";
import type { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { isUuid } from "../runtime/ids.js";
import { UnprocessablePayloadError } from "../runtime/errors.js";
import { toRemoteSource } from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";
import type { ConnectionRow } from "./store.js";

/** Internal: intake resolves a remote trigger payload's connectionId. */
export function createInternalHandlers(deps: RemoteSourceDeps): Pick<ServiceImpl<typeof RemoteSourcesService>, "resolveConnection"> {
  const { sql } = deps;

  return {
    async resolveConnection(req) {
      // Intake asks for a remote trigger payload's connectionId; an unknown one is a payload the
      // endpoint cannot act on.
      if (!isUuid(req.connectionId) || !isUuid(req.orgId)) throw new UnprocessablePayloadError("Unknown remote connection");
      const [row] = await sql<ConnectionRow[]>`
        select * from remotesource.connections where org_id = ${req.orgId} and id = ${req.connectionId}`;
      if (!row) throw new UnprocessablePayloadError("Unknown remote connection");
      return toRemoteSource(row);
    },
  };
}
