import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { DeliverChatRequest, IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { RateLimitedError } from "../runtime/errors.js";
import { type DeliveryPath, mapOrRefuse } from "./delivery.js";
import type { ReceiverSecrets } from "./receiver-secrets.js";
import { InvalidUtf8Error, parseTriggerBody } from "./request-body.js";
import { chatSource } from "./sources/index.js";
import type { IntakeStore } from "./store.js";

/** The spec's limit on the chat receiver: authenticated calls per minute per organization. */
export const CHAT_CALLS_PER_MINUTE = 60;

/** The chat-message receiver, `POST /triggers/chat/{org_slug}`. */
export function createChatHandlers(deps: {
  store: IntakeStore;
  receiverSecrets: ReceiverSecrets;
  delivery: DeliveryPath;
}): Pick<ServiceImpl<typeof IntakeService>, "deliverChat"> {
  const { store, receiverSecrets, delivery } = deps;
  return {
    async deliverChat(req: DeliverChatRequest, context: HandlerContext) {
      // Only authenticated calls spend the route's budget: outsiders cannot lock the workflow out.
      const secret = context.requestHeader.get("x-service-chat-secret") ?? "";
      const org = await receiverSecrets.resolve(`chat:${req.orgSlug}`, "chat", req.orgSlug, secret, context);
      const window = await store.chatWindows.countCall(req.orgSlug);
      if (window.calls > CHAT_CALLS_PER_MINUTE)
        throw new RateLimitedError(`more than ${CHAT_CALLS_PER_MINUTE} calls a minute to this route`, window.retry_after);
      await delivery.admitBody(org.id, "chat", req.body.byteLength, context);
      let body: unknown;
      try {
        body = parseTriggerBody(req.body, req.contentType, { allowForm: true });
      } catch (err) {
        if (err instanceof InvalidUtf8Error) throw err;
        return { outcome: "ignored", reason: "the body is neither JSON nor form fields" };
      }
      if (!chatSource.recognize(body)) return { outcome: "ignored", reason: "channel_id is missing" };
      return delivery.deliver(org, "chat", chatSource.badge, body, mapOrRefuse(chatSource, body), context);
    },
  };
}
