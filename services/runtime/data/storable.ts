import type { JsonObject } from "@bufbuild/protobuf";

/** Postgres text and jsonb cannot hold U+0000; a sender's stray NUL must not fail the delivery. */
export function storableText(value: string): string {
  return value.includes("\u0000") ? value.replaceAll("\u0000", "\uFFFD") : value;
}

/**
 * A copy of the JSON that Postgres can store: every NUL in its strings replaced (see
 * `storableText`).
 */
export function storableJson(value: JsonObject): JsonObject {
  return sanitize(value) as JsonObject;
}

function sanitize(value: unknown): unknown {
  if (typeof value === "string") return storableText(value);
  if (Array.isArray(value)) return value.map(sanitize);
  if (value !== null && typeof value === "object") {
    const copy: Record<string, unknown> = {};
    for (const [key, entry] of Object.entries(value)) {
      if (key === "__proto__") continue;
      copy[storableText(key)] = sanitize(entry);
    }
    return copy;
  }
  return value;
}
