import { createHash } from "node:crypto";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { cutCharacters, cutUtf8, storableCut, storableText, utf8ByteLength } from "./text-limits.js";
import type { AlertDelivery, AlertInit, AlertKind, Severity, SourceBadge } from "./types.js";

export interface EntityRef {
  kind: string;
  id: string;
}

/** What every source mapping produces before the shared limits are applied. */
export interface NormalizedAlert {
  source: SourceBadge;
  /** Empty: every delivery opens its own incident. */
  attachIdentity: string;
  /** Empty: the delivery carries nothing that identifies a redelivery. */
  eventId: string;
  kind: AlertKind;
  title: string;
  severity: Severity;
  entity?: EntityRef | undefined;
  summary?: string | undefined;
  link?: string | undefined;
  alertRef?: string | undefined;
  occurredAt?: Timestamp | undefined;
  runbookUrl?: string | undefined;
  data?: JsonObject | undefined;
}

// The spec limits only chat titles and chat text; these caps keep any other sender from storing
// megabytes per timeline entry.
export const MAX_TITLE_CHARACTERS = 1024;
export const MAX_SUMMARY_BYTES = 8192;
const MAX_REFERENCE_BYTES = 1024;
const MAX_LINK_BYTES = 4096;
// Any one string kept in `data`; the sources bound breadth and depth themselves.
const MAX_DATA_STRING_BYTES = 8192;
const MAX_ENTITY_PART_BYTES = 512;

// Attach identities and event identifiers are unique-indexed, and a btree entry must stay well
// under a page, so a long one is replaced by its digest. The same input always gives the same
// digest, which is all an identity needs.
const MAX_IDENTITY_BYTES = 512;
const MAX_EVENT_ID_BYTES = 256;

/**
 * The delivery the incident core records for a normalized alert, its texts and identifiers cut to
 * the stored limits.
 */
export function toAlertDelivery(alert: NormalizedAlert): AlertDelivery {
  const text = storableText;
  const init: AlertInit = {
    source: alert.source,
    attachIdentity: boundIdentifier(text(alert.attachIdentity), MAX_IDENTITY_BYTES, `${alert.source}:`),
    eventId: boundIdentifier(text(alert.eventId), MAX_EVENT_ID_BYTES, ""),
    kind: alert.kind,
    title: cutCharacters(text(alert.title), MAX_TITLE_CHARACTERS),
    severity: alert.severity,
  };
  if (alert.entity) {
    init.entity = {
      kind: cutUtf8(text(alert.entity.kind), MAX_ENTITY_PART_BYTES),
      id: cutUtf8(text(alert.entity.id), MAX_ENTITY_PART_BYTES),
    };
  }
  if (alert.summary !== undefined) init.summary = cutUtf8(text(alert.summary), MAX_SUMMARY_BYTES);
  // A cut link would point somewhere else, so an overlong one is dropped instead.
  if (alert.link !== undefined && utf8ByteLength(alert.link) <= MAX_LINK_BYTES) init.link = text(alert.link);
  if (alert.alertRef !== undefined) init.alertRef = cutUtf8(text(alert.alertRef), MAX_REFERENCE_BYTES);
  if (alert.occurredAt !== undefined) init.occurredAt = alert.occurredAt;
  if (alert.runbookUrl !== undefined && utf8ByteLength(alert.runbookUrl) <= MAX_LINK_BYTES) {
    init.runbookUrl = text(alert.runbookUrl);
  }
  if (alert.data !== undefined) init.data = storableJson(alert.data) as JsonObject;
  return { alert: init };
}

function storableJson(value: JsonValue): JsonValue {
  if (typeof value === "string") return storableCut(value, MAX_DATA_STRING_BYTES);
  if (Array.isArray(value)) return value.map(storableJson);
  if (value !== null && typeof value === "object") {
    const copy: JsonObject = {};
    for (const [key, entry] of Object.entries(value)) {
      if (key !== "__proto__") copy[storableText(key)] = storableJson(entry);
    }
    return copy;
  }
  return value;
}

function boundIdentifier(value: string, maxBytes: number, prefix: string): string {
  if (utf8ByteLength(value) <= maxBytes) return value;
  return `${prefix}sha256:${sha256Hex(value)}`;
}

/** A digest of several parts that cannot collide by shifting text from one part to the next. */
export function digestOf(parts: readonly string[]): string {
  return sha256Hex(JSON.stringify(parts));
}

/**
 * `digestOf([base64 of bytes])`, without building the base64 text or its JSON: a large body is
 * hashed in slices, and the digest is the same as before, so a redelivery across an upgrade
 * still matches.
 */
export function digestOfBytes(bytes: Uint8Array): string {
  const hash = createHash("sha256").update('["');
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // A multiple of 3 bytes: each slice's base64 has no padding, so the slices join as the whole's.
  const slice = 3 * 16_384;
  for (let offset = 0; offset < buffer.length; offset += slice) hash.update(buffer.subarray(offset, offset + slice).toString("base64"));
  return hash.update('"]').digest("hex");
}

function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}
