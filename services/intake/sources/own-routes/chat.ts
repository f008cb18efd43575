import type { JsonObject } from "@bufbuild/protobuf";
import { asHttpUrl, asIdentifier, asText, compactJson, isRecord, jsonObjectSnapshot } from "../foreign-json.js";
import { toAlertDelivery } from "../normalized-alert.js";
import { cutCharacters, cutUtf8, encodePathSegment } from "../text-limits.js";
import { timestampFromDate, timestampFromEpochSeconds } from "../timestamps.js";
import type { MapContext, MappedDelivery, Severity } from "../types.js";

// Messages a chat tool's workflow forwards to the chat-message receiver, as JSON or as
// form fields.

export const badge = "chat" as const;

export const MAX_TITLE_CHARACTERS = 120;
export const MAX_TEXT_BYTES = 8 * 1024;
const MAX_OTHER_FIELD_BYTES = 1024;
const TITLE_PREFIX = "Chat: ";

// A word is delimited by anything that is not a letter, digit or underscore in any script, so
// "download", "P10" and "sev1x" are not matches while "down.", "(P1)" and "SEV1:" are.
const URGENT_WORD = /(?<![\p{L}\p{N}_])(?:p1|sev1|outage|down)(?![\p{L}\p{N}_])/iu;

/** The receiver has its own route, so any object or form body is this shape. */
export function recognize(body: unknown): boolean {
  return isRecord(body) || body instanceof URLSearchParams;
}

/** Form bodies as field → first value; a field named `__proto__` is dropped, never assigned. */
export function parseChatForm(formBody: string): Record<string, string> {
  return formFields(new URLSearchParams(formBody));
}

/**
 * A chat message (JSON or form fields) as one delivery; without `channel_id` or `message_id` it is
 * ignored.
 */
export function map(body: unknown, context: MapContext): MappedDelivery {
  const fields: Record<string, unknown> = body instanceof URLSearchParams ? formFields(body) : isRecord(body) ? body : Object.create(null);
  const read = (name: string) => (Object.hasOwn(fields, name) ? fields[name] : undefined);

  const channelId = asIdentifier(read("channel_id"));
  const messageId = asIdentifier(read("message_id"));
  if (channelId === undefined) return { outcome: "ignored", reason: "channel_id is missing" };
  if (messageId === undefined) return { outcome: "ignored", reason: "message_id is missing" };

  const authorPubkey = asText(read("author_pubkey"));
  const author = authorPubkey ?? asText(read("author"));
  const text = typeof read("text") === "string" ? (read("text") as string) : "";
  const keptText = cutUtf8(text, MAX_TEXT_BYTES);
  const messageRef = `${channelId}/${messageId}`;

  return toAlertDelivery({
    source: badge,
    // Spec: the message id is the attach identity, so one message opens one incident.
    attachIdentity: `${badge}:${messageId}`,
    // Empty on purpose: a repeat of the same message is recorded as a repeat each time.
    eventId: "",
    kind: "alert",
    title: chatTitle(text, channelId),
    severity: proposedSeverity(text),
    summary: keptText.trim() === "" ? undefined : keptText,
    link: messageLink(channelId, messageId, read("message_link") ?? read("permalink")),
    alertRef: messageRef,
    occurredAt: messageTime(read("timestamp")) ?? timestampFromDate(context.receivedAt),
    data: compactJson({
      channelId,
      messageId,
      author,
      authorPubkey,
      emoji: asText(read("emoji")),
      trigger: asText(read("trigger")),
      textTruncated: keptText.length < text.length ? true : undefined,
      raw: rawDelivery(fields, keptText),
    }),
  });
}

/** `Chat: <first line>`, the whole title cut at 120 characters. */
export function chatTitle(text: string, channelId: string): string {
  const firstLine = text
    .split(/\r\n|\r|\n/)
    .map((line) => line.trim())
    .find((line) => line !== "");
  return cutCharacters(`${TITLE_PREFIX}${firstLine ?? `message in ${channelId}`}`, MAX_TITLE_CHARACTERS);
}

/** sev2 when the text names P1, sev1, an outage or something down as a whole word; else sev3. */
export function proposedSeverity(text: string): Severity {
  return URGENT_WORD.test(text) ? "sev2" : "sev3";
}

/**
 * We do not know the chat tool's address, so the link back is a `chat://<channel>/<message>`
 * reference the console resolves; an http(s) permalink the workflow sends along is used instead.
 */
function messageLink(channelId: string, messageId: string, permalink: unknown): string {
  return asHttpUrl(permalink) ?? `chat://${encodePathSegment(channelId)}/${encodePathSegment(messageId)}`;
}

/** Unix seconds; form bodies carry it as text. Chat tools with fractional ids (`1718186712.348`) work too. */
function messageTime(value: unknown) {
  if (typeof value === "number") return value >= 0 ? timestampFromEpochSeconds(value) : undefined;
  if (typeof value === "string" && /^\d{1,12}(?:\.\d{1,9})?$/.test(value.trim())) {
    return timestampFromEpochSeconds(Number(value.trim()));
  }
  return undefined;
}

/**
 * The delivery as sent. `text` is held to the same 8 KiB as the timeline and other fields to
 * less, so the copy never outgrows what the timeline keeps of the message.
 */
function rawDelivery(fields: Record<string, unknown>, keptText: string): JsonObject {
  const raw = jsonObjectSnapshot(fields, { maxDepth: 4, maxEntries: 50, maxStringBytes: MAX_OTHER_FIELD_BYTES });
  if (Object.hasOwn(fields, "text") && typeof fields.text === "string") raw.text = keptText;
  return raw;
}

function formFields(params: URLSearchParams): Record<string, string> {
  const fields: Record<string, string> = Object.create(null);
  for (const [name, value] of params) {
    if (name === "__proto__" || Object.hasOwn(fields, name)) continue;
    fields[name] = value;
  }
  return fields;
}
