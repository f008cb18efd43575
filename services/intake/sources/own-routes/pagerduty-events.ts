import type { JsonObject } from "@bufbuild/protobuf";
import { asHttpUrl, asRecord, compactJson, isRecord, jsonSnapshot, ownField } from "../foreign-json.js";
import { digestOf, toAlertDelivery, type EntityRef } from "../normalized-alert.js";
import { parseDateTime } from "../timestamps.js";
import type { AlertDelivery, AlertKind, MapContext, Severity } from "../types.js";

// PagerDuty Events API v2 (`POST /v2/enqueue`), change events (`POST /v2/change/enqueue`) and the
// older Events API v1 (`POST /generic/2010-04-15/create_event.json`), read as PagerDuty reads them:
// the same required fields, the same limits, and a list of every problem in the answer.
// `routing_key` (v1: `service_key`) is the organization's ingest token; the endpoint checks it
// before calling these.

export const badge = "pagerduty-events" as const;

/** PagerDuty's documented limits. */
export const LIMITS = { dedupKeyCharacters: 255, summaryCharacters: 1024 } as const;

const ACTIONS = ["trigger", "acknowledge", "resolve"] as const;
type EventAction = (typeof ACTIONS)[number];

const SEVERITIES: Record<string, Severity> = { critical: "sev1", error: "sev2", warning: "sev3", info: "sev4" };

const KIND_OF_ACTION: Record<EventAction, AlertKind> = { trigger: "alert", acknowledge: "acknowledge", resolve: "recovery" };

/**
 * A body PagerDuty would refuse with 400 `invalid event`. `errors` is the list PagerDuty returns,
 * one sentence per problem.
 */
export class PagerDutyEventError extends Error {
  override readonly name = "PagerDutyEventError";
  constructor(readonly errors: readonly string[]) {
    super(errors.join("; "));
  }
}

export interface MappedPagerDutyEvent {
  action: EventAction;
  /** Echoed in the answer; generated when a trigger carries none, as PagerDuty does. */
  dedupKey: string;
  delivery: AlertDelivery;
}

/** The routing key (v1: `service_key`) as sent, or undefined when missing or not a non-blank string. */
export function routingKeyOf(body: unknown, field: "routing_key" | "service_key" = "routing_key"): string | undefined {
  const key = ownField(body, field);
  return typeof key === "string" && key.trim() !== "" ? key.trim() : undefined;
}

const missing = (field: string) => `'${field}' is missing or blank`;
const tooLong = (field: string, max: number) => `'${field}' is longer than ${max} characters`;

/** A string field: undefined when absent or blank; a problem when present but not a string. */
function readString(record: unknown, key: string, path: string, errors: string[]): string | undefined {
  const value = ownField(record, key);
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") {
    errors.push(`'${path}' must be a string`);
    return undefined;
  }
  return value.trim() === "" ? undefined : value;
}

/**
 * An event's action and its dedup key, under the names of its version (v2: `event_action`,
 * `dedup_key`; v1: `event_type`, `incident_key`), noting in `errors` what is missing or wrong: the
 * key may be left out only by a trigger.
 */
function readActionAndKey(
  body: Record<string, unknown>,
  names: { action: string; key: string },
  errors: string[],
): { action: (typeof ACTIONS)[number] | undefined; key: string | undefined } {
  const actionText = readString(body, names.action, names.action, errors);
  const action = ACTIONS.find((candidate) => candidate === actionText);
  if (actionText === undefined) errors.push(missing(names.action));
  else if (!action) errors.push(`'${names.action}' must be one of ${ACTIONS.join(", ")}`);
  const key = readString(body, names.key, names.key, errors);
  if (key !== undefined && [...key].length > LIMITS.dedupKeyCharacters) errors.push(tooLong(names.key, LIMITS.dedupKeyCharacters));
  if (key === undefined && action !== undefined && action !== "trigger") errors.push(missing(names.key));
  return { action, key };
}

/**
 * A PagerDuty Events v2 event as one delivery; invalid fields are refused all at once with
 * PagerDuty's messages.
 */
export function mapEvent(body: unknown, context: MapContext & { newDedupKey(): string }): MappedPagerDutyEvent {
  if (!isRecord(body)) throw new PagerDutyEventError(["Event object must be a JSON object"]);
  const errors: string[] = [];
  const { action, key: sentKey } = readActionAndKey(body, { action: "event_action", key: "dedup_key" }, errors);

  const payload = ownField(body, "payload");
  let summary: string | undefined;
  let source: string | undefined;
  let severity: Severity | undefined;
  if (action === "trigger") {
    if (!isRecord(payload)) {
      errors.push(missing("payload"));
    } else {
      summary = readString(payload, "summary", "payload.summary", errors);
      source = readString(payload, "source", "payload.source", errors);
      const severityText = readString(payload, "severity", "payload.severity", errors);
      if (summary === undefined) errors.push(missing("payload.summary"));
      else if ([...summary].length > LIMITS.summaryCharacters) errors.push(tooLong("payload.summary", LIMITS.summaryCharacters));
      if (source === undefined) errors.push(missing("payload.source"));
      if (severityText === undefined) errors.push(missing("payload.severity"));
      else if (!Object.hasOwn(SEVERITIES, severityText)) errors.push(`'payload.severity' must be one of ${Object.keys(SEVERITIES).join(", ")}`);
      else severity = SEVERITIES[severityText];
    }
  }
  checkLinks(body, errors);
  if (errors.length > 0 || !action) throw new PagerDutyEventError(errors);

  const dedupKey = sentKey ?? context.newDedupKey();
  const details = asRecord(payload);
  const component = typeof details?.component === "string" && details.component.trim() !== "" ? details.component.trim() : undefined;
  const entity: EntityRef | undefined = component ? { kind: "service", id: component } : undefined;
  const delivery = toAlertDelivery({
    source: badge,
    attachIdentity: `${badge}:${dedupKey}`,
    // PagerDuty events carry nothing that tells a redelivery from a new notification (a flapping
    // alert sends the same resolve body twice), so every accepted event is recorded.
    eventId: "",
    kind: KIND_OF_ACTION[action],
    title: summary ?? "",
    severity: severity ?? "sev3",
    entity,
    summary,
    link: firstLink(body),
    alertRef: dedupKey,
    occurredAt: parseDateTime(details?.timestamp),
    data: eventData(body, action),
  });
  return { action, dedupKey, delivery };
}

/** A change event: `payload.summary` is required; it names no alert of its own. */
export function mapChange(body: unknown, _context: MapContext): AlertDelivery {
  if (!isRecord(body)) throw new PagerDutyEventError(["Event object must be a JSON object"]);
  const errors: string[] = [];
  const payload = ownField(body, "payload");
  let summary: string | undefined;
  if (!isRecord(payload)) errors.push(missing("payload"));
  else {
    summary = readString(payload, "summary", "payload.summary", errors);
    if (summary === undefined) errors.push(missing("payload.summary"));
    else if ([...summary].length > LIMITS.summaryCharacters) errors.push(tooLong("payload.summary", LIMITS.summaryCharacters));
    readString(payload, "source", "payload.source", errors);
  }
  checkLinks(body, errors);
  if (errors.length > 0) throw new PagerDutyEventError(errors);
  const details = asRecord(payload)!;
  const data = eventData(body, "change");
  return toAlertDelivery({
    source: badge,
    // Filled in by the endpoint: the open incident the change is recorded on.
    attachIdentity: "",
    // A change is one fact: a retried post of the same body is recorded once.
    eventId: `change:${digestOf([JSON.stringify(data)])}`,
    kind: "change",
    title: summary!,
    severity: "sev3",
    summary,
    link: firstLink(body),
    occurredAt: parseDateTime(details.timestamp),
    data,
  });
}

/** v1 has no severity; PagerDuty files its alerts as errors. */
const V1_SEVERITY = "error";

/**
 * A PagerDuty Events v1 event: checked with v1's field names, then read as the v2 event it
 * corresponds to (`incident_key` is the dedup key, `description` the summary, `details` the
 * custom details, `contexts` the links and images), so both versions name one alert by one key.
 */
export function mapV1Event(body: unknown, context: MapContext & { newDedupKey(): string }): MappedPagerDutyEvent {
  if (!isRecord(body)) throw new PagerDutyEventError(["Event object must be a JSON object"]);
  const errors: string[] = [];
  const { action, key: incidentKey } = readActionAndKey(body, { action: "event_type", key: "incident_key" }, errors);
  const description = readString(body, "description", "description", errors);
  if (description === undefined && action === "trigger") errors.push(missing("description"));
  else if (description !== undefined && [...description].length > LIMITS.summaryCharacters) errors.push(tooLong("description", LIMITS.summaryCharacters));
  const client = readString(body, "client", "client", errors);
  const contexts = ownField(body, "contexts");
  if (contexts !== undefined && contexts !== null && !Array.isArray(contexts)) errors.push("'contexts' must be an array");
  if (errors.length > 0 || !action) throw new PagerDutyEventError(errors);

  const links: unknown[] = [];
  const images: unknown[] = [];
  for (const entry of Array.isArray(contexts) ? contexts : []) {
    const type = ownField(entry, "type");
    if (type === "link") links.push(entry);
    else if (type === "image") images.push(entry);
  }
  const details = ownField(body, "details");
  const asV2 = {
    event_action: action,
    dedup_key: incidentKey,
    payload: {
      summary: description,
      source: client ?? "PagerDuty Events API v1",
      severity: V1_SEVERITY,
      ...(details !== undefined ? { custom_details: details } : {}),
    },
    client,
    client_url: ownField(body, "client_url"),
    links: links.map((link) => ({ href: ownField(link, "href"), text: ownField(link, "text") })),
    images: images.map((image) => ({ src: ownField(image, "src"), href: ownField(image, "href"), alt: ownField(image, "alt") })),
  };
  return mapEvent(asV2, context);
}

function checkLinks(body: Record<string, unknown>, errors: string[]): void {
  for (const field of ["links", "images"] as const) {
    const value = ownField(body, field);
    if (value !== undefined && value !== null && !Array.isArray(value)) errors.push(`'${field}' must be an array`);
  }
}

/** The entry's link: the first http(s) `links[].href`, else `client_url`. */
function firstLink(body: Record<string, unknown>): string | undefined {
  const links = ownField(body, "links");
  if (Array.isArray(links)) {
    for (const link of links) {
      const href = asHttpUrl(ownField(link, "href"));
      if (href) return href;
    }
  }
  return asHttpUrl(ownField(body, "client_url"));
}

/** What is kept on the entry: everything but the routing key, bounded. */
function eventData(body: Record<string, unknown>, action: string): JsonObject {
  const payload = asRecord(ownField(body, "payload"));
  return compactJson({
    eventAction: action,
    dedupKey: typeof body.dedup_key === "string" ? body.dedup_key : undefined,
    payload: payload ? jsonSnapshot(payload) : undefined,
    client: typeof body.client === "string" ? body.client : undefined,
    clientUrl: asHttpUrl(ownField(body, "client_url")),
    links: Array.isArray(body.links) ? jsonSnapshot(body.links, { maxEntries: 20 }) : undefined,
    images: Array.isArray(body.images) ? jsonSnapshot(body.images, { maxEntries: 20 }) : undefined,
  });
}
