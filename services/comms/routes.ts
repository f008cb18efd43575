import type { ServiceImpl } from "@connectrpc/connect";
import type { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";
import { createChatWebhookConnectionHandlers } from "./chat-webhook-connection.js";
import type { CommsDeps } from "./deps.js";
import { createEgressSwitchHandlers } from "./egress-switch.js";
import { createMessageHandlers } from "./messages.js";

/** Every CommsService method, from its handler groups. */
export function createCommsRoutes(deps: CommsDeps): ServiceImpl<typeof CommsService> {
  return {
    ...createEgressSwitchHandlers(deps),
    ...createChatWebhookConnectionHandlers(deps),
    ...createMessageHandlers(deps),
  };
}
