import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { DeliverRequest, IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { bearerToken } from "../runtime/credentials/auth.js";
import type { Clients } from "../runtime/transport/clients.js";
import { UnauthenticatedError, UnavailableError, UnprocessablePayloadError } from "../runtime/errors.js";
import type { IngestTokenResolver } from "../runtime/credentials/ingest-token-cache.js";
import { type DeliveryPath, mapOrRefuse } from "./delivery.js";
import { UNRECOGNIZED } from "./request-body.js";
import { type AlertInit, recognizeTrigger } from "./sources/index.js";

/**
 * The shared trigger endpoint (`POST /triggers`): metrics-monitor, cloud-monitor, log-analytics,
 * error-tracker and remote-source shapes, authenticated by the organization's ingest token.
 */
export function createTriggerEndpointHandlers(deps: {
  clients: Clients;
  ingestTokens: IngestTokenResolver;
  delivery: DeliveryPath;
}): Pick<ServiceImpl<typeof IntakeService>, "deliver"> {
  const { clients, ingestTokens, delivery } = deps;

  async function requireConnection(org: Organization, alert: AlertInit, context: HandlerContext): Promise<void> {
    const connectionId = (alert.data as { connectionId?: string } | undefined)?.connectionId ?? "";
    try {
      await clients.remoteSources.resolveConnection({ orgId: org.id, connectionId }, { signal: context.signal });
    } catch (err) {
      // The remote-source service refuses an unknown connection as an unprocessable payload
      // (InvalidArgument); NotFound is accepted too. Either way the sender's field is at fault.
      const code = ConnectError.from(err).code;
      if (code === Code.NotFound || code === Code.InvalidArgument) {
        throw new UnprocessablePayloadError(`connectionId ${JSON.stringify(connectionId)} is not a remote source of this organization`);
      }
      throw new UnavailableError("unavailable");
    }
  }

  return {
    async deliver(req: DeliverRequest, context: HandlerContext) {
      const token = bearerToken(context.requestHeader.get("authorization"));
      if (!token) throw new UnauthenticatedError("Missing trigger ingest token");
      const org = await ingestTokens.resolve(token, context.signal);
      const body = await delivery.readJson(org.id, "shared", req, context);
      const source = recognizeTrigger(body);
      if (!source) throw new UnprocessablePayloadError(UNRECOGNIZED);
      const mapped = mapOrRefuse(source, body);
      if (mapped.alert?.source === "remote") await requireConnection(org, mapped.alert, context);
      return delivery.deliver(org, "shared", source.badge, body, mapped, context);
    },
  };
}
