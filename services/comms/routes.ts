import type { ConnectRouter } from "@connectrpc/connect";
import { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";
import { chatWebhookConnectionHandlers } from "./chat-webhook-connection.js";
import type { CommsDeps } from "./deps.js";
import { egressSwitchHandlers } from "./egress-switch.js";
import { messageHandlers } from "./messages.js";

/**
 * Registers CommsService on the router, built from the egress, connection and message handler
 * groups.
 */
export function registerRoutes(router: ConnectRouter, deps: CommsDeps): void {
  router.service(CommsService, {
    ...egressSwitchHandlers(deps),
    ...chatWebhookConnectionHandlers(deps),
    ...messageHandlers(deps),
  });
}
