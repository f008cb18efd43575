import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { InvalidArgumentError, NotFoundError, UnavailableError } from "../runtime/errors.js";
import { isEgressError } from "../runtime/egress/index.js";
import { SecretBoxError } from "../runtime/credentials/secret-box.js";
import { buildTestCard } from "./adaptive-card.js";
import { describeSaveRefusal, postCard } from "./chat-webhook-delivery.js";
import { AUDIT_KINDS, type CommsDeps } from "./deps.js";
import type { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";

/** One connection per organization, and this is its name. */
export const CONNECTION_NAME = "default";
const URL_MAX = 2048;

/** Binds a ciphertext to its organization and purpose: copied into another row, it does not open. */
export function associatedData(orgId: string): string {
  return `comms.chat_connections:${orgId}:${CONNECTION_NAME}`;
}

/**
 * The organization's webhook URL in clear, for the one call about to be made, or undefined when
 * no connection is saved. A URL sealed under a key that is no longer the first is sealed again.
 */
export async function loadWebhookUrl(deps: CommsDeps, orgId: string): Promise<string | undefined> {
  const { store, logger } = deps;
  const stored = await store.loadConnection(orgId, CONNECTION_NAME);
  if (!stored) return undefined;
  const box = deps.secretBox();
  let url: string;
  try {
    url = box.open(stored, associatedData(orgId));
  } catch (err) {
    if (err instanceof SecretBoxError) {
      logger.error({ orgId, keyId: stored.keyId, reason: err.message }, "chat-webhook URL cannot be decrypted");
      throw new UnavailableError(`the saved chat-webhook URL cannot be decrypted (${err.message}); save the connection again`);
    }
    throw err;
  }
  if (box.isStale(stored.keyId)) await store.resealConnection(orgId, CONNECTION_NAME, stored, box.seal(url, associatedData(orgId)));
  return url;
}

/**
 * The handlers of the organization's chat-webhook connection: save (sealed), read (never the URL),
 * test and delete, each audited.
 */
export function createChatWebhookConnectionHandlers(
  deps: CommsDeps,
): Pick<ServiceImpl<typeof CommsService>, "saveChatWebhook" | "getChatWebhook" | "testChatWebhook" | "deleteChatWebhook"> {
  const { store, clients, outbox, config } = deps;

  return {
    async saveChatWebhook(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const webhookUrl = req.webhookUrl.trim();
      if (!webhookUrl) throw new InvalidArgumentError("webhookUrl required");
      if (webhookUrl.length > URL_MAX) throw new InvalidArgumentError(`webhookUrl must be at most ${URL_MAX} characters`);
      try {
        // The same check every send and test makes: https, no credentials, every resolved address public.
        await deps.egress.vet(webhookUrl);
      } catch (err) {
        if (isEgressError(err)) throw new InvalidArgumentError(describeSaveRefusal(err));
        throw err;
      }
      const sealed = deps.secretBox().seal(webhookUrl, associatedData(principal.orgId));
      await store.saveConnection(principal.orgId, CONNECTION_NAME, sealed, principal.email, (replaced) => ({
        orgId: principal.orgId,
        kind: AUDIT_KINDS.chatWebhookSaved,
        actor: principal.email,
        data: { connection: CONNECTION_NAME, replaced },
      }));
      outbox.poke();
      return { name: CONNECTION_NAME, connected: true };
    },

    async getChatWebhook(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return { name: CONNECTION_NAME, connected: await store.hasConnection(principal.orgId, CONNECTION_NAME) };
    },

    async testChatWebhook(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const webhookUrl = await loadWebhookUrl(deps, principal.orgId);
      if (webhookUrl === undefined) {
        throw new NotFoundError("no chat-webhook connection is saved: PUT /o/{org}/integrations/chatwebhook/connections/default first");
      }
      // The one post that leaves while real egress is off: the admin asked for it.
      const outcome = await postCard(
        deps.egress,
        webhookUrl,
        buildTestCard({ orgSlug: principal.orgSlug, consoleUrl: `${config.publicUrl}/o/${principal.orgSlug}/incidents` }),
        config.CHAT_WEBHOOK_TIMEOUT_SECONDS,
      );
      await store.recordAudit({
        orgId: principal.orgId,
        kind: AUDIT_KINDS.chatWebhookTested,
        actor: principal.email,
        data: {
          connection: CONNECTION_NAME,
          ok: outcome.ok,
          ...(outcome.ok ? {} : { error: outcome.error }),
        },
      });
      outbox.poke();
      return outcome.ok ? { ok: true } : { ok: false, error: outcome.error };
    },

    async deleteChatWebhook(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      await store.deleteConnection(principal.orgId, CONNECTION_NAME, {
        orgId: principal.orgId,
        kind: AUDIT_KINDS.chatWebhookDeleted,
        actor: principal.email,
        data: { connection: CONNECTION_NAME },
      });
      outbox.poke();
      return {};
    },
  };
}
