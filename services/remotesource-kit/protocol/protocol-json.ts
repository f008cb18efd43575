import { fromJson, ScalarType, toJson, type DescMessage, type JsonObject, type JsonValue, type MessageShape } from "@bufbuild/protobuf";

/**
 * The one JSON codec of the remote source protocol (HTTP form), used by the hosting kit and by the
 * service's client alike. The schema is the protocol; this file holds the few places where the
 * spec's JSON differs from plain proto3 JSON:
 *
 * - 64-bit integers (`fromMs`, `toMs`) are JSON numbers, not strings.
 * - `raw` is the provider's JSON value itself on HTTP; in the schema (and so on gRPC) it is the
 *   JSON text of that value.
 * - `error` of a RawResult is always present: a string, or null.
 * - `series`, `entries` and a log entry's `labels` are optional: left out when empty. Other unset
 *   optional fields (`detail`, `namespace`, `unit`, `canonical`, `window`, ...) are left out.
 * - A Struct (`params`) is always an object, `{}` when unset.
 *
 * Decoding is lenient where the spec is: unknown fields are ignored, null means unset, and 64-bit
 * integers may be numbers or strings. It is not lenient where the spec states a type: proto3 JSON
 * would read `"42"` or `"Infinity"` as a double, but the spec's values are finite JSON numbers
 * (rule 7), so a double given as anything but a JSON number decodes as NaN, which the rule 7
 * checks (shaped-data.ts) refuse; and a series point's or log entry's time given as a number
 * decodes as its text, which is not ISO 8601, so rule 7 refuses it too rather than the whole answer.
 */

export class ProtocolJsonError extends Error {
  override name = "ProtocolJsonError";
}

const RAW_FIELD = "warroom.sourceprotocol.v1.RawResult.raw";
const NULL_WHEN_UNSET = new Set(["warroom.sourceprotocol.v1.RawResult.error"]);
const OMIT_WHEN_EMPTY = new Set([
  "warroom.sourceprotocol.v1.RawResult.series",
  "warroom.sourceprotocol.v1.RawResult.entries",
  "warroom.sourceprotocol.v1.LogEntry.labels",
]);
/** Times rule 7 holds to ISO 8601 text. */
const TIME_FIELDS = new Set(["warroom.sourceprotocol.v1.Point.t", "warroom.sourceprotocol.v1.LogEntry.t"]);
const INT64 = new Set([ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64]);
const STRUCT = "google.protobuf.Struct";
const WELL_KNOWN = "google.protobuf.";

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** A protocol message in the spec's HTTP JSON form. */
export function toProtocolJson<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): JsonObject {
  const json = toJson(schema, message, { alwaysEmitImplicit: true }) as JsonObject;
  shapeOut(schema, json);
  return json;
}

/** The HTTP body of a protocol message. */
export function encodeProtocolJson<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): string {
  return JSON.stringify(toProtocolJson(schema, message));
}

/** A protocol message from its HTTP JSON form; throws ProtocolJsonError naming the bad field. */
export function fromProtocolJson<Desc extends DescMessage>(schema: Desc, value: unknown): MessageShape<Desc> {
  if (!isObject(value)) throw new ProtocolJsonError(`${schema.name} must be a JSON object`);
  const prepared = shapeIn(schema, value);
  try {
    return fromJson(schema, prepared as JsonObject, { ignoreUnknownFields: true });
  } catch (err) {
    throw new ProtocolJsonError(describeDecodeError(err));
  }
}

/** Parses an HTTP body into a protocol message; throws ProtocolJsonError. */
export function decodeProtocolJson<Desc extends DescMessage>(schema: Desc, text: string): MessageShape<Desc> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ProtocolJsonError(`${schema.name} is not valid JSON`);
  }
  return fromProtocolJson(schema, value);
}

/** The text `raw` holds in the schema, from the provider's JSON value. */
export function rawText(value: JsonValue | undefined): string {
  return value === undefined || value === null ? "" : JSON.stringify(value);
}

/** The provider's JSON value from the text `raw` holds in the schema (null when empty). */
export function rawValue(text: string): JsonValue {
  if (text === "") return null;
  try {
    return JSON.parse(text) as JsonValue;
  } catch {
    // A gRPC source that put plain text in `raw`: kept verbatim, as a string.
    return text;
  }
}

function shapeOut(desc: DescMessage, json: JsonObject): void {
  for (const field of desc.fields) {
    const key = field.jsonName;
    const qualified = `${desc.typeName}.${field.name}`;
    const value = json[key];
    if (qualified === RAW_FIELD) {
      json[key] = rawValue(typeof value === "string" ? value : "");
      continue;
    }
    if (NULL_WHEN_UNSET.has(qualified)) {
      if (value === undefined) json[key] = null;
      continue;
    }
    switch (field.fieldKind) {
      case "scalar":
        if (INT64.has(field.scalar) && typeof value === "string") json[key] = Number(value);
        break;
      case "message":
        if (field.message.typeName === STRUCT) {
          if (value === undefined) json[key] = {};
        } else if (isObject(value) && !field.message.typeName.startsWith(WELL_KNOWN)) {
          shapeOut(field.message, value as JsonObject);
        }
        break;
      case "list":
        if (!Array.isArray(value)) break;
        if (field.listKind === "message" && !field.message.typeName.startsWith(WELL_KNOWN)) {
          for (const item of value) if (isObject(item)) shapeOut(field.message, item as JsonObject);
        } else if (field.listKind === "scalar" && INT64.has(field.scalar)) {
          json[key] = value.map((item) => (typeof item === "string" ? Number(item) : item));
        }
        if (value.length === 0 && OMIT_WHEN_EMPTY.has(qualified)) delete json[key];
        break;
      case "map":
        if (!isObject(value)) break;
        if (field.mapKind === "message" && !field.message.typeName.startsWith(WELL_KNOWN)) {
          for (const item of Object.values(value)) if (isObject(item)) shapeOut(field.message, item as JsonObject);
        }
        if (Object.keys(value).length === 0 && OMIT_WHEN_EMPTY.has(qualified)) delete json[key];
        break;
      default:
        break;
    }
  }
}

function shapeIn(desc: DescMessage, input: Record<string, unknown>): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...input };
  for (const field of desc.fields) {
    const key = field.jsonName in copy ? field.jsonName : field.name in copy ? field.name : undefined;
    if (key === undefined) continue;
    const value = copy[key];
    if (value === null) {
      // proto3 JSON reads null as "unset"; said once here so no decoder has to care.
      delete copy[key];
      continue;
    }
    if (`${desc.typeName}.${field.name}` === RAW_FIELD) {
      copy[key] = rawText(value as JsonValue);
      continue;
    }
    if (field.fieldKind === "scalar" && (field.scalar === ScalarType.DOUBLE || field.scalar === ScalarType.FLOAT) && typeof value !== "number") {
      copy[key] = "NaN";
      continue;
    }
    if (TIME_FIELDS.has(`${desc.typeName}.${field.name}`) && (typeof value === "number" || typeof value === "boolean")) {
      copy[key] = String(value);
      continue;
    }
    if (field.fieldKind === "message" && !field.message.typeName.startsWith(WELL_KNOWN) && isObject(value)) {
      copy[key] = shapeIn(field.message, value);
    } else if (field.fieldKind === "list" && field.listKind === "message" && !field.message.typeName.startsWith(WELL_KNOWN) && Array.isArray(value)) {
      const message = field.message;
      copy[key] = value.map((item) => (isObject(item) ? shapeIn(message, item) : item));
    }
  }
  return copy;
}

function describeDecodeError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  // protobuf-es: `cannot decode field warroom.sourceprotocol.v1.WindowBounds.from_ms from JSON: 1.5`.
  const match = /cannot decode (?:field \S+?\.(\w+)\.(\w+)|message (\S+)) from JSON: (.*)/.exec(message);
  if (match?.[1] && match[2]) return `invalid value for ${match[1]}.${snakeToCamel(match[2])}: ${match[4]}`;
  if (match?.[3]) return `invalid ${match[3].split(".").pop()}: ${match[4]}`;
  return `invalid JSON shape: ${message}`;
}

function snakeToCamel(name: string): string {
  return name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}
