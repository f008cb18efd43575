import { encodeCursor, pageOf, pageRequest } from "../runtime/data/page-cursor.js";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { Incident } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { isUuid } from "../runtime/ids.js";
import { ConflictError, InvalidArgumentError, NotFoundError, PermissionDeniedError, UnavailableError } from "../runtime/errors.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { buildUpdateCard } from "./adaptive-card.js";
import { parseChannel } from "./channel.js";
import { loadWebhookUrl } from "./chat-webhook-connection.js";
import { postCard, type DeliveryOutcome } from "./chat-webhook-delivery.js";
import { incidentAsCaller, type CommsDeps } from "./deps.js";
import type { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";
import type { MessageRow } from "./store.js";
import { recordOnTimeline, sendRecordOf } from "./timeline.js";
import { SYSTEM_AUTHOR } from "./war-room-link.js";

/** Longest update text, in UTF-8 bytes: well inside the channel's 28 KB card limit. */
export const BODY_MAX_BYTES = 8 * 1024;

/**
 * The update text with trailing white space removed; empty or over the byte limit is
 * InvalidArgument.
 */
export function checkBody(raw: string): string {
  const body = raw.replace(/\s+$/u, "");
  if (!body.trim()) throw new InvalidArgumentError("body required");
  const bytes = Buffer.byteLength(body, "utf8");
  if (bytes > BODY_MAX_BYTES) throw new InvalidArgumentError(`body must be at most ${BODY_MAX_BYTES} bytes of UTF-8 (it has ${bytes})`);
  return body;
}

/** Why a message cannot be sent now, in words. */
function notSendable(row: MessageRow): ConflictError {
  switch (row.state) {
    case "drafted":
      return new ConflictError(
        `message ${row.id} is not approved: a person approves it first (POST .../comms/messages/${row.id}/approve with its version); nothing is sent before approval`,
      );
    case "sending":
      return new ConflictError(`message ${row.id} is already being sent; each message is sent at most once`);
    case "failed":
      return new ConflictError(
        `message ${row.id} already failed to send (${row.error ?? "unknown error"}); each message is sent at most once: draft a new update`,
      );
    default:
      return new ConflictError(`message ${row.id} was already sent (state: ${row.state}); each message is sent at most once: draft a new update to post again`);
  }
}

function toMessage(row: MessageRow) {
  const time = (at: Date | null | undefined) => (at ? timestampFromDate(at) : undefined);
  return {
    messageId: row.id,
    version: String(row.version),
    channel: row.channel,
    body: row.body,
    state: row.state,
    ...(row.error ? { error: row.error } : {}),
    draftedBy: row.drafted_by ?? "",
    ...(row.drafted_at ? { draftedAt: time(row.drafted_at) } : {}),
    ...(row.edited_by ? { editedBy: row.edited_by, editedAt: time(row.edited_at) } : {}),
    ...(row.approved_by ? { approvedBy: row.approved_by } : {}),
    ...(row.approved_at ? { approvedAt: time(row.approved_at) } : {}),
    ...(row.finished_at ? { sentAt: time(row.finished_at) } : {}),
    ...(row.sent_by ? { sentBy: row.sent_by } : {}),
  };
}

/** Why a message at `version` could not be edited, discarded or approved: not a draft, or read at another version. */
function notADraft(row: MessageRow, version: string | undefined, verb: "approved" | "edited" | "discarded"): ConflictError {
  if (row.state !== "drafted") {
    return new ConflictError(`message ${row.id} is already ${row.state}; only a draft can be ${verb}${verb === "edited" ? ": draft a new update" : ""}`);
  }
  const action = verb === "approved" ? "approve" : verb === "edited" ? "edit" : "discard";
  return new ConflictError(`stale version ${version}: message ${row.id} is at version ${row.version}; read it again and ${action} what you read`);
}

/**
 * The handlers of incident updates: draft, list, approve and send, each update leaving at most
 * once.
 */
export function createMessageHandlers(
  deps: CommsDeps,
): Pick<ServiceImpl<typeof CommsService>, "draftMessage" | "listMessages" | "approveMessage" | "sendMessage" | "editMessage" | "discardMessage"> {
  const { store, clients, outbox, logger, config } = deps;

  async function findMessage(orgId: string, incidentId: string, messageId: string): Promise<MessageRow> {
    const row = isUuid(messageId) ? await store.findMessage(orgId, incidentId, messageId) : undefined;
    if (!row) throw new NotFoundError(`no message ${messageId} on incident ${incidentId}`);
    return row;
  }

  /** The timeline entry is written now; if the incident core cannot take it, a sweep writes it later. */
  async function recordSoon(row: MessageRow): Promise<void> {
    try {
      await recordOnTimeline(deps, sendRecordOf(row));
    } catch (err) {
      logger.warn({ messageId: row.id, err: String(err) }, "timeline entry not written yet; the sweep retries");
    }
  }

  async function deliver(row: MessageRow, incident: Incident, webhookUrl: string): Promise<DeliveryOutcome> {
    const card = buildUpdateCard({
      incidentTitle: incident.title,
      severity: incident.severity,
      incidentState: incident.state,
      text: row.body,
      textIsLiteral: row.drafted_by === SYSTEM_AUTHOR,
      workspaceUrl: incident.workspaceUrl,
    });
    try {
      return await postCard(deps.egress, webhookUrl, card, config.CHAT_WEBHOOK_TIMEOUT_SECONDS);
    } catch (err) {
      // Not an egress outcome (a bug, not the channel): the message still leaves `sending`.
      logger.error({ messageId: row.id, err: err instanceof Error ? err.name : "error" }, "chat-webhook post failed unexpectedly");
      return { ok: false, error: "Chat webhook call failed" };
    }
  }

  return {
    async draftMessage(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const channel = parseChannel(req.channel);
      const body = checkBody(req.body);
      await incidentAsCaller(deps, context, req.org, req.incidentId);
      const row = await store.draftMessage({
        orgId: principal.orgId,
        incidentId: req.incidentId,
        channel: channel.value,
        label: channel.label ?? null,
        body,
        draftedBy: principal.email,
      });
      return { messageId: row.id, version: String(row.version) };
    },

    async listMessages(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const { limit, after } = pageRequest(req, "c", isUuid, { fallback: 1000, max: 1000 });
      const rows = await store.listMessages(principal.orgId, req.incidentId, after, limit + 1);
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("c", last.id));
      return { messages: page.map(toMessage), ...(nextCursor ? { nextCursor } : {}) };
    },

    async approveMessage(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const version = req.version.trim();
      if (!version) throw new InvalidArgumentError("version required: echo the version the draft returned");
      const current = await findMessage(principal.orgId, req.incidentId, req.messageId);
      // The second-approver rule: whoever wrote the words (the drafter, or the last editor) does
      // not approve them. Checked on the version read; the approval below holds only at that
      // version, so an edit meanwhile (a new version) makes it stale.
      if (current.state === "drafted" && String(current.version) === version && (await store.requireSecondApprover(principal.orgId))) {
        if (current.drafted_by === principal.email || current.edited_by === principal.email) {
          throw new PermissionDeniedError(
            `this organization requires a second person to approve an update (comms setting requireSecondApprover): ask another member to approve it, or an admin to change the setting at PUT /o/${req.org}/comms/settings`,
          );
        }
        // A draft nobody wrote (the war-room offer) would otherwise go out on one person's word:
        // a person takes it on by editing it, and a second person approves it, as for any update.
        if (current.drafted_by === SYSTEM_AUTHOR && !current.edited_by) {
          throw new PermissionDeniedError(
            `this update was drafted by ${SYSTEM_AUTHOR} and this organization requires a second person to approve an update (comms setting requireSecondApprover): a member takes it on by editing it (PATCH .../comms/messages/${current.id} with its version), then another member approves it`,
          );
        }
      }
      const approved = await store.approveMessage(current.id, version, principal.email);
      if (approved !== undefined) return { messageId: current.id, version: String(approved), state: "approved" };
      throw notADraft(await findMessage(principal.orgId, req.incidentId, req.messageId), version, "approved");
    },

    async editMessage(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const version = req.version.trim();
      if (!version) throw new InvalidArgumentError("version required: echo the version the draft returned");
      const body = checkBody(req.body);
      const current = await findMessage(principal.orgId, req.incidentId, req.messageId);
      const edited = await store.editMessage(current.id, version, body, principal.email);
      if (edited !== undefined) return { messageId: current.id, version: String(edited) };
      throw notADraft(await findMessage(principal.orgId, req.incidentId, req.messageId), version, "edited");
    },

    async discardMessage(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const version = req.version.trim() || undefined;
      const current = await findMessage(principal.orgId, req.incidentId, req.messageId);
      if (await store.discardMessage(current.id, version)) return {};
      throw notADraft(await findMessage(principal.orgId, req.incidentId, req.messageId), version, "discarded");
    },

    async sendMessage(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const current = await findMessage(principal.orgId, req.incidentId, req.messageId);
      if (current.state !== "approved") throw notSendable(current);
      const incident = await incidentAsCaller(deps, context, req.org, req.incidentId);
      const real = await store.egressEnabled(principal.orgId);
      let webhookUrl: string | undefined;
      if (real) {
        webhookUrl = await loadWebhookUrl(deps, principal.orgId);
        if (webhookUrl === undefined) {
          throw new ConflictError(
            "real egress is on but no chat-webhook connection is saved: an admin saves one (PUT /o/{org}/integrations/chatwebhook/connections/default) or switches egress off; the message stays approved",
          );
        }
      }

      // The claim: one conditional update moves the message out of `approved`, so of two racing
      // sends exactly one goes on; with egress off it is final at once.
      const target = real ? "sending" : "simulated";
      const claimed = await store.claimSend(current.id, target, principal.email);
      if (!claimed) throw notSendable(await findMessage(principal.orgId, req.incidentId, req.messageId));
      outbox.poke();

      if (target === "simulated") {
        await recordSoon(claimed);
        return { messageId: claimed.id, state: "simulated" };
      }

      const outcome = await deliver(claimed, incident, webhookUrl!);
      const finished = await store.finishSend(claimed.id, outcome.ok ? { ok: true } : { ok: false, error: outcome.error });
      outbox.poke();
      if (finished) await recordSoon(finished);
      if (!outcome.ok) throw new UnavailableError(outcome.error);
      return { messageId: claimed.id, state: "sent" };
    },
  };
}
