import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { DeliverRequest, IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { bearerToken } from "../runtime/credentials/auth.js";
import { UnprocessablePayloadError } from "../runtime/errors.js";
import { type DeliveryPath, mapOrRefuse } from "./delivery.js";
import type { ReceiverSecrets } from "./receiver-secrets.js";
import { UNRECOGNIZED } from "./request-body.js";
import { alertRouterSource } from "./sources/index.js";

/** The alert-router (Alertmanager webhook) receiver, `POST /triggers/alertrouter`. */
export function createAlertRouterHandlers(deps: {
  receiverSecrets: ReceiverSecrets;
  delivery: DeliveryPath;
}): Pick<ServiceImpl<typeof IntakeService>, "deliverAlertRouter"> {
  const { receiverSecrets, delivery } = deps;
  return {
    async deliverAlertRouter(req: DeliverRequest, context: HandlerContext) {
      const org = await receiverSecrets.resolve("alertrouter", "alertrouter", "", alertRouterSecret(context), context);
      const body = await delivery.readJson(org.id, "alertrouter", req, context);
      if (!alertRouterSource.recognize(body)) throw new UnprocessablePayloadError(UNRECOGNIZED, "not an alert-router (Alertmanager webhook) notification");
      return delivery.deliver(org, "alertrouter", alertRouterSource.badge, body, mapOrRefuse(alertRouterSource, body), context);
    },
  };
}

/**
 * The alert-router's secret: the `x-service-alertrouter-secret` header, or `Authorization: Bearer`
 * (what Alertmanager before 0.28 can send, through `http_config.authorization`). Either way a
 * wrong or missing one gets the same uniform 401.
 */
function alertRouterSecret(context: HandlerContext): string {
  return context.requestHeader.get("x-service-alertrouter-secret") ?? bearerToken(context.requestHeader.get("authorization")) ?? "";
}
