import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { RawResultSchema } from "../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { InvalidArgumentError } from "../runtime/errors.js";
import { ReadRequestError, type ReadOutcome } from "../remotesource-kit/client/source-client.js";
import { clientFor, loadConnection, recordStatus } from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";
import { CREDENTIALS_REJECTED } from "../remotesource-kit/protocol/limits.js";
import { toProtocolJson } from "../remotesource-kit/protocol/protocol-json.js";
import { isReadCall, READ_CALLS } from "../remotesource-kit/protocol/protocol-routes.js";

/** A read through a connection, with the connection's tenant, for the console's query view. */
export function createReadHandlers(deps: RemoteSourceDeps): Pick<ServiceImpl<typeof RemoteSourcesService>, "readRemoteSource"> {
  const { clients } = deps;

  return {
    async readRemoteSource(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (!isReadCall(req.call)) throw new InvalidArgumentError(`call must be one of ${READ_CALLS.join(", ")}`);
      const row = await loadConnection(deps, principal.orgId, req.id);
      const request: JsonObject = { ...(req.request ?? {}) };
      // The tenant is the connection's, whatever the caller sends.
      delete request.tenant;
      let outcome: ReadOutcome;
      try {
        outcome = await clientFor(deps, row).read(req.call, request);
      } catch (err) {
        if (err instanceof ReadRequestError) throw new InvalidArgumentError(err.message);
        throw err;
      }
      if (outcome.failure?.kind === "credentials-rejected") {
        // Shown as failed until the credential is updated (or a test passes again).
        await recordStatus(deps, row, "failed", CREDENTIALS_REJECTED, { tested: false });
      }
      return fromJson(StructSchema, toProtocolJson(RawResultSchema, outcome.result));
    },
  };
}
