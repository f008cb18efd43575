import {
  fromJson,
  isFieldSet,
  ScalarType,
  toJson,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type Message,
  type MessageShape,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";

/**
 * The JSON of the public HTTP routes: proto3 JSON with camelCase names, every field present
 * (defaults included), and an unset optional or message field written as null, so that clients
 * see `lastSeenAt: null` and `entity: null` rather than a missing key.
 */
export function messageToHttpJson<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): JsonValue {
  const json = toJson(schema, message, { alwaysEmitImplicit: true });
  fillNulls(schema, message, json);
  return json;
}

const WELL_KNOWN_PREFIX = "google.protobuf.";

function hasExplicitPresence(field: DescField): boolean {
  return field.fieldKind === "message" || field.presence === FeatureSet_FieldPresence.EXPLICIT;
}

function fillNulls(schema: DescMessage, message: Message, json: JsonValue): void {
  if (schema.typeName.startsWith(WELL_KNOWN_PREFIX)) return;
  if (json === null || typeof json !== "object" || Array.isArray(json)) return;
  const object = json as JsonObject;
  for (const field of schema.fields) {
    if (field.fieldKind === "map") continue;
    if (field.oneof && field.fieldKind !== "message" && !field.proto.proto3Optional) continue;
    if (field.fieldKind === "list") {
      if (field.listKind === "message") {
        const items: Message[] = Reflect.get(message, field.localName);
        const jsonItems = object[field.jsonName];
        if (Array.isArray(jsonItems)) for (const [i, item] of items.entries()) fillNulls(field.message, item, jsonItems[i] ?? null);
      }
      continue;
    }
    if (!hasExplicitPresence(field)) continue;
    if (!isFieldSet(message, field)) {
      object[field.jsonName] = null;
    } else if (field.fieldKind === "message") {
      fillNulls(field.message, Reflect.get(message, field.localName), object[field.jsonName] ?? null);
    }
  }
}

export class RequestShapeError extends Error {
  override name = "RequestShapeError";
}

/** Builds a request message from a JSON body, path parameters and query parameters. */
export function requestFromHttp<Desc extends DescMessage>(
  schema: Desc,
  parts: {
    body?: JsonObject;
    pathParams: Record<string, string>;
    query: URLSearchParams;
    rawBody?: { field: string; bytes: Uint8Array; contentType: string };
    headers?: Record<string, string>;
  },
): MessageShape<Desc> {
  const json: JsonObject = { ...(parts.body ?? {}) };
  // Path parameters win over the body: the path names the resource.
  const fromPath = new Set<string>();
  for (const [name, value] of Object.entries(parts.pathParams)) {
    const field = fieldByName(schema, name);
    if (!field) throw new RequestShapeError(`unknown path parameter ${name}`);
    json[field.jsonName] = value;
    fromPath.add(field.jsonName);
  }
  for (const [name, value] of parts.query) {
    const field = fieldByName(schema, name);
    // The path wins over the query too: `?key=` never replaces the key the path names.
    if (field?.fieldKind !== "scalar" || fromPath.has(field.jsonName)) continue;
    json[field.jsonName] = scalarFromQuery(field, value);
  }
  let message: MessageShape<Desc>;
  try {
    message = fromJson(schema, json, { ignoreUnknownFields: true });
  } catch (err) {
    throw new RequestShapeError(describeDecodeError(err));
  }
  if (parts.rawBody) {
    const target = message as Record<string, unknown>;
    const bodyField = fieldByName(schema, parts.rawBody.field);
    if (bodyField) target[bodyField.localName] = parts.rawBody.bytes;
    const typeField = fieldByName(schema, "content_type");
    if (typeField) target[typeField.localName] = parts.rawBody.contentType;
  }
  // A route that hands the sender's whole request to its mapping (a custom source) declares these
  // two maps: every header and every query parameter, as they came.
  const target = message as Record<string, unknown>;
  const headersField = fieldByName(schema, "request_headers");
  if (headersField?.fieldKind === "map" && parts.headers) target[headersField.localName] = { ...parts.headers };
  const queryField = fieldByName(schema, "query_params");
  if (queryField?.fieldKind === "map") target[queryField.localName] = Object.fromEntries(parts.query);
  return message;
}

/**
 * The message's field named `name` in the proto (snake_case) or in JSON (camelCase); undefined when
 * there is none.
 */
export function fieldByName(schema: DescMessage, name: string): DescField | undefined {
  return schema.fields.find((f) => f.name === name || f.jsonName === name);
}

function scalarFromQuery(field: DescField, value: string): JsonValue {
  if (field.fieldKind !== "scalar") return value;
  switch (field.scalar) {
    case ScalarType.BOOL:
      return value === "true" || value === "1";
    case ScalarType.INT32:
    case ScalarType.UINT32:
    case ScalarType.SINT32:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT: {
      const n = Number(value);
      if (!Number.isFinite(n)) throw new RequestShapeError(`query parameter ${field.jsonName} must be a number`);
      return n;
    }
    default:
      return value;
  }
}

function describeDecodeError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  // protobuf-es says e.g. `cannot decode field warroom.heartbeats.v1.RegisterHeartbeatRequest.grace_seconds from JSON: "x"`.
  const match = /cannot decode (?:field \S+\.(\w+)|message \S+) from JSON: (.*)/.exec(message);
  if (match?.[1]) return `invalid value for ${snakeToCamel(match[1])}: ${match[2]}`;
  return `invalid request body: ${message}`;
}

function snakeToCamel(name: string): string {
  return name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}
