import type { JsonValue } from "@bufbuild/protobuf";
import { z } from "zod";
import { asHttpUrl, asText, compactJson, jsonSnapshot, looseIdentifier, looseRecord, looseText, looseValue, ownField } from "./foreign-json.js";
import { toAlertDelivery, type EntityRef } from "./normalized-alert.js";
import { PayloadError } from "./payload-error.js";
import { timestampFromEpochMilliseconds, timestampFromEpochSeconds } from "./timestamps.js";
import type { AlertKind, MapContext, MappedDelivery, Severity } from "./types.js";

// Webhook bodies from a metrics monitor (the Datadog webhooks integration with a custom body).

export const badge = "metrics-monitor" as const;
export const DEFAULT_TITLE = "Metrics alert";

// Only this many tags are read; a monitor has a handful, and the identity sorts them.
const MAX_TAGS = 1000;

/** Spec: a string `alert_type` or an array `tags`. */
export function recognize(body: unknown): boolean {
  return typeof ownField(body, "alert_type") === "string" || Array.isArray(ownField(body, "tags"));
}

const MetricsMonitorBody = z.object({
  title: looseText,
  body: looseText,
  alert_id: looseIdentifier,
  event_id: looseIdentifier,
  alert_type: looseText,
  alert_transition: looseText,
  priority: looseText,
  alert_priority: looseText,
  link: looseText,
  date: looseValue,
  tags: looseValue,
  alert_scope: looseText,
  alert_query: looseText,
  alert_metric: looseText,
  alert_status: looseText,
  hostname: looseText,
  snapshot: looseText,
  event_type: looseText,
  aggreg_key: looseText,
  alert_cycle_key: looseText,
  org: looseRecord,
});

/** A metrics-monitor webhook body as one delivery. */
export function map(body: unknown, _context: MapContext): MappedDelivery {
  const parsed = MetricsMonitorBody.safeParse(body);
  if (!parsed.success) throw new PayloadError("body", "body must be a JSON object");
  const delivery = parsed.data;

  const title = delivery.title ?? DEFAULT_TITLE;
  const tags = readTags(delivery.tags);
  const alertId = delivery.alert_id;

  return toAlertDelivery({
    source: badge,
    attachIdentity: alertId !== undefined ? `${badge}:alert:${alertId}` : `${badge}:title:${identityTitle(title)}|${[...new Set(tags)].sort().join(",")}`,
    eventId: delivery.event_id ?? "",
    kind: alertKind(delivery.alert_transition, delivery.alert_type),
    title,
    severity: severity(delivery.priority, delivery.alert_priority, delivery.alert_type),
    entity: serviceEntity(tags),
    summary: delivery.body,
    link: asHttpUrl(delivery.link),
    alertRef: alertId,
    occurredAt: occurredAt(delivery.date),
    data: compactJson({
      alert_type: delivery.alert_type,
      alert_transition: delivery.alert_transition,
      priority: delivery.priority,
      alert_priority: delivery.alert_priority,
      // Kept as sent, including a comma-separated string, so an operator can see why no
      // service was attached.
      tags: tagsAsSent(delivery.tags),
      alert_scope: delivery.alert_scope,
      alert_query: delivery.alert_query,
      alert_metric: delivery.alert_metric,
      alert_status: delivery.alert_status,
      hostname: delivery.hostname,
      snapshot: asHttpUrl(delivery.snapshot),
      event_type: delivery.event_type,
      aggreg_key: delivery.aggreg_key,
      alert_cycle_key: delivery.alert_cycle_key,
      org: delivery.org === undefined ? undefined : jsonSnapshot(delivery.org, { maxDepth: 2, maxEntries: 10 }),
    }),
  });
}

const PRIORITY_SEVERITY: Readonly<Record<string, Severity>> = {
  P1: "sev1",
  P2: "sev2",
  P3: "sev3",
  P4: "sev4",
  P5: "sev4",
};

/**
 * The spec reads P1..P5 from `priority`. In the monitor's own template variables `$PRIORITY` is
 * the event priority (`normal`/`low`) and the P-value is `$ALERT_PRIORITY`, so real bodies carry
 * both. A P-value in `priority` wins (the spec's field), otherwise one in `alert_priority`; only
 * when neither holds a P-value does `alert_type` decide.
 */
export function severity(priority?: string, alertPriority?: string, alertType?: string): Severity {
  const fromPriority = priorityToSeverity(priority) ?? priorityToSeverity(alertPriority);
  if (fromPriority) return fromPriority;
  return alertType?.toLowerCase() === "error" ? "sev2" : "sev3";
}

function priorityToSeverity(value: string | undefined): Severity | undefined {
  if (value === undefined) return undefined;
  const key = value.toUpperCase();
  return Object.hasOwn(PRIORITY_SEVERITY, key) ? PRIORITY_SEVERITY[key] : undefined;
}

/**
 * `Recovered` is a recovery; `No Data` and its repeat `Re-No Data` are no-data notices; every
 * other transition (Triggered, Re-Triggered, Warn, Re-Warn, Renotify) is an alert. Without a
 * transition (old templates, or the `Null` some versions rendered) the legacy reading applies:
 * `alert_type` `success` is a recovery and `info` a no-data notice.
 */
export function alertKind(alertTransition?: string, alertType?: string): AlertKind {
  const transition = alertTransition?.toLowerCase();
  if (transition !== undefined && transition !== "null") {
    if (transition === "recovered") return "recovery";
    if (transition === "no data" || transition === "re-no data") return "no_data";
    return "alert";
  }
  const type = alertType?.toLowerCase();
  if (type === "success") return "recovery";
  if (type === "info") return "no_data";
  return "alert";
}

/**
 * Spec: only an array is read as tags; a comma-separated string is not, so such a delivery opens
 * with no service. Non-string and blank entries are skipped.
 */
export function readTags(value: unknown): string[] {
  if (!Array.isArray(value)) return [];
  const tags: string[] = [];
  for (const entry of value.slice(0, MAX_TAGS)) {
    const tag = asText(entry);
    if (tag !== undefined) tags.push(tag);
  }
  return tags;
}

/** The first `service:<name>` tag names the affected service. */
export function serviceEntity(tags: readonly string[]): EntityRef | undefined {
  for (const tag of tags) {
    if (!tag.startsWith("service:")) continue;
    const name = tag.slice("service:".length).trim();
    if (name !== "") return { kind: "service", id: name };
  }
  return undefined;
}

/**
 * The monitor's `$EVENT_TITLE` starts with the transition (`[Triggered on {host:a}] High CPU`,
 * `[Recovered on {host:a}] High CPU`, sometimes after a `[P2]`). Without `alert_id` the identity
 * is title + tags, and a recovery must find the room its trigger opened, so the priority and the
 * transition word are left out of the identity. The scope (`on {host:a}`) stays: it tells apart
 * the hosts of one multi-alert.
 */
export function identityTitle(title: string): string {
  let rest = title.trimStart();
  const priorityPrefix = /^\[P[1-5]\]\s*/i;
  // One quantifier per stretch of text, so a long title without a closing bracket cannot make
  // the match backtrack.
  const transitionPrefix = /^\[(?:Re-Triggered|Triggered|Re-Warn|Warn|Recovered|Re-No Data|No Data|Renotify)(?=[\s\]])([^\]]*)\]/i;
  rest = rest.replace(priorityPrefix, "");
  const transition = transitionPrefix.exec(rest);
  if (transition) {
    const scope = (transition[1] ?? "").trim();
    rest = `${scope === "" ? "" : `[${scope}] `}${rest.slice(transition[0].length).trimStart()}`;
  }
  return rest.trim();
}

/**
 * `$DATE` is epoch milliseconds as a string. Values too small to be milliseconds of this era are
 * read as seconds, which hand-written bodies sometimes use.
 */
function occurredAt(value: unknown) {
  const number = typeof value === "number" ? value : typeof value === "string" && /^\d{1,16}$/.test(value.trim()) ? Number(value) : undefined;
  if (number === undefined || !Number.isFinite(number) || number < 0) return undefined;
  return number >= 1e11 ? timestampFromEpochMilliseconds(number) : timestampFromEpochSeconds(number);
}

function tagsAsSent(value: unknown): JsonValue | undefined {
  if (Array.isArray(value)) return readTags(value).slice(0, 100);
  return asText(value);
}
