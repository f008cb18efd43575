import { z } from "zod";
import { AlertSchema } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { allowedValues } from "../../runtime/schema-rules.js";
import { asHttpUrl, compactJson, ownField } from "./foreign-json.js";
import { digestOf, toAlertDelivery, type EntityRef } from "./normalized-alert.js";
import { PayloadError } from "./payload-error.js";
import { parseRfc3339 } from "./timestamps.js";
import type { MapContext, MappedDelivery } from "./types.js";

// The remote-source trigger payload: our own protocol, so unlike the vendor shapes it is
// validated strictly and a bad field is refused with a message naming it.

export const badge = "remote" as const;

/** The severities a trigger may name: the schema's Alert allows these (its `string.in` rule). */
export const SEVERITIES = allowedValues(AlertSchema.field.severity);

/** Recognized by `serviceSource: "remote"` alone; every other field is checked by `map`. */
export function recognize(body: unknown): boolean {
  return ownField(body, "serviceSource") === "remote";
}

const requiredText = (field: string) =>
  z
    .string({ error: (issue) => (issue.input === undefined ? `${field} is required` : `${field} must be a string`) })
    .trim()
    .min(1, { error: `${field} must not be empty` });

const optionalText = (field: string) =>
  z
    .string({ error: `${field} must be a string` })
    .trim()
    .min(1, { error: `${field} must not be empty` })
    .optional();

// Field order is the order problems are reported in: required fields first, as the spec lists them.
const RemoteTriggerPayload = z.object({
  serviceSource: z.literal("remote", { error: 'serviceSource must be "remote"' }),
  connectionId: requiredText("connectionId"),
  title: requiredText("title"),
  severity: z.enum(SEVERITIES, {
    error: (issue) => (issue.input === undefined ? "severity is required" : `severity must be one of ${SEVERITIES.join(", ")}`),
  }),
  occurredAt: optionalText("occurredAt"),
  entityHints: z
    .array(z.string({ error: "entityHints entries must be kind:value strings" }), {
      error: "entityHints must be an array of kind:value strings",
    })
    .optional(),
  dedupKey: optionalText("dedupKey"),
  summary: z.string({ error: "summary must be a string" }).optional(),
  url: optionalText("url"),
  kind: z.enum(["trigger", "recovery"], { error: "kind must be trigger or recovery" }).optional(),
});

/**
 * A remote-source trigger (`serviceSource: "remote"`) as one delivery; an invalid field is refused
 * naming it.
 */
export function map(body: unknown, _context: MapContext): MappedDelivery {
  const parsed = RemoteTriggerPayload.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field =
      issue?.path.map((part, index) => (typeof part === "number" ? `[${part}]` : index === 0 ? String(part) : `.${String(part)}`)).join("") || "body";
    throw new PayloadError(field, field === "body" ? "body must be a JSON object" : (issue?.message ?? `${field} is invalid`));
  }
  const payload = parsed.data;

  const occurredAt = payload.occurredAt === undefined ? undefined : parseRfc3339(payload.occurredAt);
  if (payload.occurredAt !== undefined && occurredAt === undefined) {
    throw new PayloadError("occurredAt", "occurredAt must be an RFC 3339 timestamp");
  }
  const link = payload.url === undefined ? undefined : asHttpUrl(payload.url);
  if (payload.url !== undefined && link === undefined) {
    throw new PayloadError("url", "url must be an http or https URL");
  }
  const entityHints = (payload.entityHints ?? []).map(parseEntityHint);
  const kind = payload.kind ?? "trigger";

  return toAlertDelivery({
    source: badge,
    attachIdentity: attachIdentity(payload.connectionId, payload.dedupKey, payload.title),
    eventId: eventId(payload.connectionId, payload.dedupKey ?? payload.title, kind, payload.occurredAt, occurredAt),
    kind: kind === "recovery" ? "recovery" : "alert",
    title: payload.title,
    severity: payload.severity,
    entity: entityHints[0],
    summary: payload.summary?.trim() === "" ? undefined : payload.summary,
    link,
    alertRef: payload.dedupKey,
    occurredAt,
    data: compactJson({
      connectionId: payload.connectionId,
      dedupKey: payload.dedupKey,
      kind,
      entityHints: entityHints.slice(0, 50).map((hint) => `${hint.kind}:${hint.id}`),
    }),
  });
}

/**
 * Per connection, so two remote sources never share an incident. With `dedupKey` the identity is
 * the sender's own alert key (its recovery reuses it); without one, the title stands in, which is
 * the closest thing to "the same alert" the payload offers.
 */
export function attachIdentity(connectionId: string, dedupKey: string | undefined, title: string): string {
  return dedupKey !== undefined ? `${badge}:${connectionId}:${dedupKey}` : `${badge}:${connectionId}:title:${title}`;
}

/**
 * The payload has no notification id. A redelivery repeats the same alert, kind and `occurredAt`,
 * so their digest identifies it. Without `occurredAt` two notifications cannot be told from a
 * redelivery, so none is set and each delivery is recorded.
 */
function eventId(
  connectionId: string,
  alertKey: string,
  kind: string,
  occurredAtText: string | undefined,
  occurredAt: ReturnType<typeof parseRfc3339>,
): string {
  if (occurredAtText === undefined || occurredAt === undefined) return "";
  return digestOf([connectionId, alertKey, kind, `${occurredAt.seconds}.${occurredAt.nanos}`]);
}

/** `kind:value`, split at the first colon, so a value may itself contain colons (`url:https://…`). */
function parseEntityHint(hint: string, index: number): EntityRef {
  const separator = hint.indexOf(":");
  const kind = separator < 0 ? "" : hint.slice(0, separator).trim();
  const id = separator < 0 ? "" : hint.slice(separator + 1).trim();
  if (kind === "" || id === "") {
    throw new PayloadError(`entityHints[${index}]`, `entityHints[${index}] must be kind:value`);
  }
  return { kind, id };
}
