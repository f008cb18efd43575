import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { z } from "zod";
import { cutUtf8 } from "./text-limits.js";

// Senders template their bodies by hand, so a field may be missing, blank, a number where a
// string was meant, or null. These readers turn every such case into "absent" instead of
// failing, and the per-source zod schemas below are built from them.

/** Whether the value is a plain JSON object (not null, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A non-blank string, trimmed; anything else is absent. */
export function asText(value: unknown): string | undefined {
  if (typeof value !== "string") return undefined;
  const trimmed = value.trim();
  return trimmed === "" ? undefined : trimmed;
}

/** Identifiers arrive as strings or, when a template leaves the quotes off, as numbers. */
export function asIdentifier(value: unknown): string | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : undefined;
  return asText(value);
}

/** The value when it is a finite number; anything else is absent. */
export function asFiniteNumber(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

/** The value when it is an array; anything else is absent. */
export function asArray(value: unknown): readonly unknown[] | undefined {
  return Array.isArray(value) ? value : undefined;
}

/** The value when it is a plain object; anything else is absent. */
export function asRecord(value: unknown): Record<string, unknown> | undefined {
  return isRecord(value) ? value : undefined;
}

/** Own properties only, so a key such as `constructor` never resolves to something inherited. */
export function ownField(record: unknown, key: string): unknown {
  return isRecord(record) && Object.hasOwn(record, key) ? record[key] : undefined;
}

// zod treats a bare `z.unknown()` object member as required, so each starts from `.optional()`.
export const looseValue = z.unknown().optional();
export const looseText = looseValue.transform(asText);
export const looseIdentifier = looseValue.transform(asIdentifier);
export const looseNumber = looseValue.transform(asFiniteNumber);
export const looseArray = looseValue.transform(asArray);
export const looseRecord = looseValue.transform(asRecord);

/** The first argument that is a non-blank string. */
export function firstText(...values: unknown[]): string | undefined {
  for (const value of values) {
    const text = asText(value);
    if (text !== undefined) return text;
  }
  return undefined;
}

const MAX_LINK_LENGTH = 4096;

/**
 * Links end up as anchors in the console, so only http(s) is kept: a `javascript:` or `data:`
 * link from a sender must never become clickable.
 */
export function asHttpUrl(value: unknown): string | undefined {
  const text = asText(value);
  if (text === undefined || text.length > MAX_LINK_LENGTH) return undefined;
  if (!URL.canParse(text)) return undefined;
  const { protocol } = new URL(text);
  return protocol === "http:" || protocol === "https:" ? text : undefined;
}

/**
 * String-valued entries of a label map (alert-router labels, Azure custom properties), in a Map
 * so that a key like `__proto__` is just a key.
 */
export function stringEntries(value: unknown, maxEntries = 200): Map<string, string> {
  const entries = new Map<string, string>();
  if (!isRecord(value)) return entries;
  for (const [key, entry] of Object.entries(value)) {
    if (entries.size >= maxEntries) break;
    if (typeof entry === "string") entries.set(key, entry);
  }
  return entries;
}

export interface SnapshotLimits {
  maxDepth: number;
  maxEntries: number;
  maxStringBytes: number;
}

const DEFAULT_SNAPSHOT_LIMITS: SnapshotLimits = { maxDepth: 6, maxEntries: 100, maxStringBytes: 8192 };

/**
 * A bounded copy of foreign JSON for `Alert.data`. What we keep of a delivery is stored on every
 * timeline entry, so depth, breadth and string length are capped, and `__proto__` keys are
 * dropped because assigning one to a plain object would replace its prototype.
 */
export function jsonSnapshot(value: unknown, limits: Partial<SnapshotLimits> = {}): JsonValue {
  return snapshot(value, { ...DEFAULT_SNAPSHOT_LIMITS, ...limits }, 0);
}

/** A bounded JSON copy of the value (see `jsonSnapshot`), or `{}` when it is not an object. */
export function jsonObjectSnapshot(value: unknown, limits: Partial<SnapshotLimits> = {}): JsonObject {
  const copy = jsonSnapshot(value, limits);
  return isRecord(copy) ? (copy as JsonObject) : {};
}

function snapshot(value: unknown, limits: SnapshotLimits, depth: number): JsonValue {
  if (value === null || typeof value === "boolean") return value;
  if (typeof value === "number") return Number.isFinite(value) ? value : null;
  if (typeof value === "string") return cutUtf8(value, limits.maxStringBytes);
  if (depth >= limits.maxDepth) return null;
  if (Array.isArray(value)) {
    return value.slice(0, limits.maxEntries).map((item) => snapshot(item, limits, depth + 1));
  }
  if (isRecord(value)) {
    const copy: JsonObject = {};
    let kept = 0;
    for (const [key, entry] of Object.entries(value)) {
      if (kept >= limits.maxEntries) break;
      if (key === "__proto__" || entry === undefined) continue;
      copy[key] = snapshot(entry, limits, depth + 1);
      kept += 1;
    }
    return copy;
  }
  return null;
}

/** Drops undefined members so the object is valid JSON for a protobuf Struct. */
export function compactJson(entries: Record<string, JsonValue | undefined>): JsonObject {
  const result: JsonObject = {};
  for (const [key, value] of Object.entries(entries)) {
    if (value !== undefined && key !== "__proto__") result[key] = value;
  }
  return result;
}
