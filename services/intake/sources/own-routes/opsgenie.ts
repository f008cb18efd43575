import type { JsonObject } from "@bufbuild/protobuf";
import { compactJson, isRecord, jsonSnapshot, ownField, stringEntries } from "../foreign-json.js";
import { toAlertDelivery, type EntityRef } from "../normalized-alert.js";
import { cutCharacters } from "../text-limits.js";
import type { AlertDelivery, MapContext, Severity } from "../types.js";

// Opsgenie Alert API v2: create (`POST /v2/alerts`), close and acknowledge
// (`POST /v2/alerts/{identifier}/close|acknowledge`). The endpoint authenticates the GenieKey
// and answers in Opsgenie's shapes; these read the bodies as Opsgenie does.

export const badge = "opsgenie" as const;

/** Opsgenie's documented limits: longer messages are cut, longer aliases refused. */
export const LIMITS = {
  messageCharacters: 130,
  aliasCharacters: 512,
  descriptionCharacters: 15000,
  noteCharacters: 25000,
  tags: 20,
  actions: 10,
} as const;

const PRIORITIES: Record<string, Severity> = { P1: "sev1", P2: "sev2", P3: "sev3", P4: "sev4", P5: "sev4" };

export const IDENTIFIER_TYPES = ["id", "alias", "tiny"] as const;
export type IdentifierType = (typeof IDENTIFIER_TYPES)[number];

/** A body Opsgenie would refuse with 422; `errors` maps each field to its problem, as Opsgenie does. */
export class OpsgenieRequestError extends Error {
  override readonly name = "OpsgenieRequestError";
  constructor(readonly errors: Readonly<Record<string, string>>) {
    super(Object.values(errors).join(" "));
  }
}

export interface MappedOpsgenieAlert {
  /** The attach identity's key: the alias, or the message when there is none. */
  alias: string;
  delivery: AlertDelivery;
}

function text(record: unknown, key: string, errors: Record<string, string>): string | undefined {
  const value = ownField(record, key);
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") {
    errors[key] = `${capitalized(key)} should be a string.`;
    return undefined;
  }
  const trimmed = value.trim();
  return trimmed === "" ? undefined : trimmed;
}

function capitalized(key: string): string {
  return key.charAt(0).toUpperCase() + key.slice(1);
}

/** The attach identity of an Opsgenie alias: one open incident per alias. */
export function attachIdentityOfAlias(alias: string): string {
  return `${badge}:alias:${alias}`;
}

/**
 * An Opsgenie create-alert body as one delivery; invalid fields are refused all at once with
 * Opsgenie's messages.
 */
export function mapCreate(body: unknown, _context: MapContext): MappedOpsgenieAlert {
  if (!isRecord(body)) throw new OpsgenieRequestError({ body: "Request body should be a JSON object." });
  const errors: Record<string, string> = {};
  const message = text(body, "message", errors);
  if (message === undefined && !errors.message) errors.message = "Message can not be empty.";
  const sentAlias = text(body, "alias", errors);
  if (sentAlias !== undefined && [...sentAlias].length > LIMITS.aliasCharacters) {
    errors.alias = `Alias can not be longer than ${LIMITS.aliasCharacters} characters.`;
  }
  const priorityText = text(body, "priority", errors);
  if (priorityText !== undefined && !Object.hasOwn(PRIORITIES, priorityText)) {
    errors.priority = "Priority should be one of [P1, P2, P3, P4, P5].";
  }
  const tags = ownField(body, "tags");
  if (tags !== undefined && tags !== null && !Array.isArray(tags)) errors.tags = "Tags should be a list of strings.";
  const details = ownField(body, "details");
  if (details !== undefined && details !== null && !isRecord(details)) errors.details = "Details should be a map of strings.";
  if (Object.keys(errors).length > 0) throw new OpsgenieRequestError(errors);

  const title = cutCharacters(message!, LIMITS.messageCharacters);
  // Opsgenie de-duplicates on the alias; without one, the (cut) message stands in for it.
  const alias = sentAlias ?? title;
  const tagList = Array.isArray(tags) ? tags.filter((tag): tag is string => typeof tag === "string").slice(0, LIMITS.tags) : [];
  const description = text(body, "description", errors);
  const entityText = text(body, "entity", errors);
  return {
    alias,
    delivery: toAlertDelivery({
      source: badge,
      attachIdentity: attachIdentityOfAlias(alias),
      // Nothing in a create tells a redelivery from the next notification of the alert.
      eventId: "",
      kind: "alert",
      title,
      severity: PRIORITIES[priorityText ?? "P3"]!,
      entity: entityOf(tagList, entityText),
      summary: description !== undefined ? cutCharacters(description, LIMITS.descriptionCharacters) : undefined,
      alertRef: alias,
      data: compactJson({
        alias,
        tags: tagList,
        details: detailsJson(details),
        entity: entityText,
        source: text(body, "source", errors),
        priority: priorityText,
        note: cutOptional(text(body, "note", errors), LIMITS.noteCharacters),
        user: text(body, "user", errors),
        actions: Array.isArray(ownField(body, "actions")) ? jsonSnapshot(ownField(body, "actions"), { maxEntries: LIMITS.actions }) : undefined,
        responders: Array.isArray(ownField(body, "responders")) ? jsonSnapshot(ownField(body, "responders"), { maxEntries: 50 }) : undefined,
        visibleTo: Array.isArray(ownField(body, "visibleTo")) ? jsonSnapshot(ownField(body, "visibleTo"), { maxEntries: 50 }) : undefined,
      }),
    }),
  };
}

/**
 * Close (a recovery entry) or acknowledge (an acknowledged entry) on the alert's open incident.
 * `attachIdentity` is resolved by the endpoint from the identifier; the body's `user`, `source`
 * and `note` are kept on the entry.
 */
export function mapAction(action: "close" | "acknowledge", attachIdentity: string, body: unknown, _context: MapContext): AlertDelivery {
  const errors: Record<string, string> = {};
  if (body !== undefined && !isRecord(body)) throw new OpsgenieRequestError({ body: "Request body should be a JSON object." });
  const note = cutOptional(text(body, "note", errors), LIMITS.noteCharacters);
  const user = text(body, "user", errors);
  const source = text(body, "source", errors);
  if (Object.keys(errors).length > 0) throw new OpsgenieRequestError(errors);
  return toAlertDelivery({
    source: badge,
    attachIdentity,
    eventId: "",
    kind: action === "close" ? "recovery" : "acknowledge",
    title: "",
    severity: "sev3",
    summary: note,
    data: compactJson({ action, user, source, note }),
  });
}

/** A `service:<name>` tag names the service (as on the shared endpoint), else `entity`. */
function entityOf(tags: readonly string[], entity: string | undefined): EntityRef | undefined {
  for (const tag of tags) {
    const match = /^service:(.+)$/.exec(tag.trim());
    if (match) return { kind: "service", id: match[1]!.trim() };
  }
  return entity ? { kind: "service", id: entity } : undefined;
}

function detailsJson(details: unknown): JsonObject | undefined {
  const entries = stringEntries(details, 100);
  if (entries.size === 0) return undefined;
  const json: JsonObject = {};
  for (const [key, value] of entries) if (key !== "__proto__") json[key] = value;
  return json;
}

function cutOptional(value: string | undefined, max: number): string | undefined {
  return value === undefined ? undefined : cutCharacters(value, max);
}
