import type { DescField, DescMessage, JsonValue } from "@bufbuild/protobuf";
import { toBinary } from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";

/**
 * Whether `message` encodes to at most `limit` bytes of protobuf binary, without encoding it in the
 * common case: an upper bound of its encoded size is summed first (every tag, length and number
 * counted at its widest, every string at three bytes a UTF-16 unit), and only a message whose bound
 * is over the limit is encoded to be measured exactly. The in-process transport checks every
 * request and reply against the internal message limit; encoding each only to count its bytes was
 * the largest protobuf cost of a delivery.
 */
export function encodedSizeAtMost(schema: DescMessage, message: object, limit: number): { within: boolean; bytes?: number } {
  if (messageBound(schema, message as Record<string, unknown>) <= limit) return { within: true };
  const bytes = toBinary(schema, message as never).byteLength;
  return { within: bytes <= limit, bytes };
}

/** A field's tag and length prefix, or a tag and the widest number, are each under this. */
const FRAME = 16;

function messageBound(schema: DescMessage, message: Record<string, unknown>): number {
  let total = 0;
  for (const field of schema.fields) {
    let value: unknown;
    if (field.oneof) {
      const selected = message[field.oneof.localName] as { case?: string; value?: unknown } | undefined;
      if (selected?.case !== field.localName) continue;
      value = selected.value;
    } else {
      value = message[field.localName];
    }
    if (value === undefined || value === null) continue;
    total += fieldBound(field, value);
  }
  const unknown = message.$unknown as { data: Uint8Array }[] | undefined;
  if (unknown) for (const u of unknown) total += FRAME + u.data.byteLength;
  return total;
}

function fieldBound(field: DescField, value: unknown): number {
  switch (field.fieldKind) {
    case "scalar":
    case "enum":
      return scalarBound(value);
    case "message":
      return FRAME + messageValueBound(field.message, value);
    case "list": {
      let total = FRAME;
      for (const item of value as unknown[]) total += FRAME + (field.listKind === "message" ? messageValueBound(field.message, item) : scalarBound(item));
      return total;
    }
    case "map": {
      let total = 0;
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        total += 3 * FRAME + 3 * key.length + (field.mapKind === "message" ? messageValueBound(field.message, item) : scalarBound(item));
      }
      return total;
    }
  }
}

/** A number, boolean or enum at its widest; a string at three bytes a UTF-16 unit; bytes as they are. */
function scalarBound(value: unknown): number {
  if (typeof value === "string") return FRAME + 3 * value.length;
  if (value instanceof Uint8Array) return FRAME + value.byteLength;
  return FRAME;
}

/**
 * A message-typed value as protobuf-es holds it: a message, or unboxed where the field's type says
 * so (a `google.protobuf.Struct` field as a JSON object, a wrapper field as its scalar).
 */
function messageValueBound(schema: DescMessage, value: unknown): number {
  if (typeof value !== "object" || value === null || value instanceof Uint8Array) return isWrapperDesc(schema) ? scalarBound(value) : FRAME;
  if (!("$typeName" in value)) return jsonBound(value as JsonValue);
  return messageBound(schema, value as Record<string, unknown>);
}

/**
 * A JSON value as `google.protobuf.Value` (and an object as `Struct`) encodes it: every entry,
 * element and value behind its own tag and length.
 */
function jsonBound(value: JsonValue): number {
  if (typeof value === "string") return FRAME + 3 * value.length;
  if (value === null || typeof value !== "object") return FRAME;
  let total = FRAME;
  if (Array.isArray(value)) {
    for (const item of value) total += FRAME + jsonBound(item);
    return total;
  }
  for (const [key, item] of Object.entries(value)) total += 3 * FRAME + 3 * key.length + jsonBound(item as JsonValue);
  return total;
}
