import { z } from "zod";
import { asHttpUrl, asIdentifier, compactJson, firstText, looseIdentifier, looseNumber, looseRecord, looseText, looseValue, ownField } from "./foreign-json.js";
import { toAlertDelivery } from "./normalized-alert.js";
import { PayloadError } from "./payload-error.js";
import { parseDateTime, timestampFromEpochSeconds } from "./timestamps.js";
import type { MapContext, MappedDelivery, Severity } from "./types.js";

// Issue-alert webhooks from an error tracker (Sentry's integration platform `event_alert`), and
// the older per-project WebHooks plugin body.

export const badge = "error-tracker" as const;
export const DEFAULT_TITLE = "New error issue";

/**
 * Spec: `data.event.event_id` together with `data.event.issue_id` or `data.event.issue_url`; or,
 * from the older plugin, `project_slug` beside a nested event identifier (`event.event_id` or
 * `event.id`).
 */
export function recognize(body: unknown): boolean {
  return isIssueAlert(body) || isLegacyPlugin(body);
}

function isIssueAlert(body: unknown): boolean {
  const event = ownField(ownField(body, "data"), "event");
  if (asIdentifier(ownField(event, "event_id")) === undefined) return false;
  return asIdentifier(ownField(event, "issue_id")) !== undefined || asIdentifier(ownField(event, "issue_url")) !== undefined;
}

function isLegacyPlugin(body: unknown): boolean {
  if (typeof ownField(body, "project_slug") !== "string") return false;
  const event = ownField(body, "event");
  return asIdentifier(ownField(event, "event_id")) !== undefined || asIdentifier(ownField(event, "id")) !== undefined;
}

const EventFields = z.object({
  event_id: looseIdentifier,
  id: looseIdentifier,
  issue_id: looseIdentifier,
  issue_url: looseText,
  web_url: looseText,
  title: looseText,
  message: looseText,
  culprit: looseText,
  level: looseText,
  timestamp: looseNumber,
  datetime: looseText,
  // Numeric in the integration payload: it names no service and none is guessed from it.
  project: looseIdentifier,
  environment: looseText,
  release: looseText,
  platform: looseText,
});

const IssueAlertBody = z.object({
  action: looseText,
  project_slug: looseText,
  data: z.object({
    event: EventFields,
    triggered_rule: looseText,
    issue_alert: looseRecord,
  }),
  installation: looseRecord,
});

const LegacyPluginBody = z.object({
  id: looseIdentifier,
  project_slug: looseText,
  project_name: looseText,
  level: looseText,
  culprit: looseText,
  message: looseText,
  url: looseText,
  triggering_rules: looseValue,
  event: EventFields,
});

/** Every delivery opens its own incident, so the attach identity is always empty. */
export function map(body: unknown, _context: MapContext): MappedDelivery {
  if (isIssueAlert(body)) return mapIssueAlert(body);
  if (isLegacyPlugin(body)) return mapLegacyPlugin(body);
  throw new PayloadError("data.event.event_id", "data.event.event_id with data.event.issue_id or issue_url is required");
}

function mapIssueAlert(body: unknown): MappedDelivery {
  const parsed = IssueAlertBody.safeParse(body);
  if (!parsed.success) throw new PayloadError("data.event", "data.event must be an object");
  const { data } = parsed.data;
  const { event } = data;
  const title = firstText(event.title, event.message, event.culprit) ?? DEFAULT_TITLE;
  return toAlertDelivery({
    source: badge,
    attachIdentity: "",
    eventId: event.event_id ?? "",
    kind: "alert",
    title,
    severity: severityForLevel(event.level),
    entity: parsed.data.project_slug ? { kind: "service", id: parsed.data.project_slug } : undefined,
    summary: summaryLine(title, event.culprit),
    link: asHttpUrl(event.web_url) ?? asHttpUrl(event.issue_url),
    alertRef: event.issue_id,
    occurredAt: occurredAt(event.timestamp, event.datetime),
    data: compactJson({
      action: parsed.data.action,
      level: event.level,
      issue_id: event.issue_id,
      project: event.project,
      environment: event.environment,
      release: event.release,
      platform: event.platform,
      culprit: event.culprit,
      triggered_rule: data.triggered_rule,
      issue_alert_title: firstText(ownField(data.issue_alert, "title")),
      installation: firstText(ownField(parsed.data.installation, "uuid")),
    }),
  });
}

function mapLegacyPlugin(body: unknown): MappedDelivery {
  const parsed = LegacyPluginBody.safeParse(body);
  if (!parsed.success) throw new PayloadError("event", "event must be an object");
  const delivery = parsed.data;
  const { event } = delivery;
  const culprit = delivery.culprit ?? event.culprit;
  const title = firstText(event.title, delivery.message, event.message, culprit) ?? DEFAULT_TITLE;
  const level = delivery.level ?? event.level;
  return toAlertDelivery({
    source: badge,
    attachIdentity: "",
    eventId: event.event_id ?? event.id ?? "",
    kind: "alert",
    title,
    severity: severityForLevel(level),
    entity: delivery.project_slug ? { kind: "service", id: delivery.project_slug } : undefined,
    summary: summaryLine(title, culprit),
    link: asHttpUrl(delivery.url),
    alertRef: delivery.id,
    occurredAt: occurredAt(event.timestamp, event.datetime),
    data: compactJson({
      level,
      issue_id: delivery.id,
      project_slug: delivery.project_slug,
      project_name: delivery.project_name,
      environment: event.environment,
      release: event.release,
      platform: event.platform,
      culprit,
      triggering_rules: Array.isArray(delivery.triggering_rules)
        ? delivery.triggering_rules.slice(0, 20).flatMap((rule) => (typeof rule === "string" ? [rule] : []))
        : undefined,
    }),
  });
}

/** fatal sev1, error sev2, everything else (warning, info, debug, none) sev3. */
export function severityForLevel(level: string | undefined): Severity {
  switch (level?.toLowerCase()) {
    case "fatal":
      return "sev1";
    case "error":
      return "sev2";
    default:
      return "sev3";
  }
}

/** The culprit says where in the code it broke, which the title alone often does not. */
function summaryLine(title: string, culprit: string | undefined): string {
  if (culprit === undefined || culprit === title) return title;
  return `${title} (culprit: ${culprit})`;
}

/** `timestamp` is epoch seconds, possibly fractional; `datetime` is the same instant as text. */
function occurredAt(timestamp: number | undefined, datetime: string | undefined) {
  return (timestamp === undefined ? undefined : timestampFromEpochSeconds(timestamp)) ?? parseDateTime(datetime);
}
