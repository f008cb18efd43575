import type { JsonObject } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { z } from "zod";
import { asHttpUrl, asText, compactJson, looseNumber, looseText, looseValue, ownField, stringEntries } from "../foreign-json.js";
import { digestOf, toAlertDelivery, type EntityRef } from "../normalized-alert.js";
import { PayloadError } from "../payload-error.js";
import { canonicalInstant, parseDateTime, timestampToMilliseconds } from "../timestamps.js";
import type { MapContext, MappedDelivery, Severity } from "../types.js";

// Webhook notifications (version 4) from an alert router (Prometheus Alertmanager). Newer
// versions add fields; unknown ones are ignored.

export const badge = "alert-router" as const;
export const DEFAULT_TITLE = "Alert-router alert";

// What is copied into `data` per notification; the digest still covers every alert.
const MAX_ALERTS_KEPT = 20;

/**
 * Whether the body is an alert-router (Alertmanager) webhook notification: a `groupKey` and an
 * `alerts` array.
 */
export function recognize(body: unknown): boolean {
  return typeof ownField(body, "groupKey") === "string" && Array.isArray(ownField(body, "alerts"));
}

const AlertRouterNotification = z.object({
  version: looseText,
  status: looseText,
  receiver: looseText,
  groupKey: looseText,
  externalURL: looseText,
  truncatedAlerts: looseNumber,
  groupLabels: looseValue,
  commonLabels: looseValue,
  commonAnnotations: looseValue,
  alerts: z.array(looseValue, { error: "alerts must be an array" }),
});

interface RoutedAlert {
  status: string | undefined;
  labels: Map<string, string>;
  annotations: Map<string, string>;
  startsAt: Timestamp | undefined;
  endsAt: Timestamp | undefined;
  fingerprint: string | undefined;
  generatorUrl: string | undefined;
}

/**
 * An alert-router notification as one delivery: firing attaches to the group's incident or opens
 * it, resolved records a recovery.
 */
export function map(body: unknown, _context: MapContext): MappedDelivery {
  const parsed = AlertRouterNotification.safeParse(body);
  if (!parsed.success) {
    const aboutAlerts = (parsed.error.issues[0]?.path.length ?? 0) > 0;
    throw aboutAlerts ? new PayloadError("alerts", "alerts must be an array") : new PayloadError("body", "body must be a JSON object");
  }
  const notification = parsed.data;
  if (notification.groupKey === undefined) throw new PayloadError("groupKey", "groupKey is required");

  const alerts = notification.alerts.map(readAlert);
  const groupLabels = stringEntries(notification.groupLabels);
  const commonLabels = stringEntries(notification.commonLabels);
  const commonAnnotations = stringEntries(notification.commonAnnotations);
  const first = alerts[0];
  // Common labels hold for the whole group, group labels are what it was grouped by, and the
  // first alert speaks for the rest when neither carries the label.
  const label = (name: string) => asText(commonLabels.get(name)) ?? asText(groupLabels.get(name)) ?? asText(first?.labels.get(name));
  const annotation = (name: string) => asText(commonAnnotations.get(name)) ?? asText(first?.annotations.get(name));
  const resolved = notification.status?.toLowerCase() === "resolved";
  if (alerts.length > 0 && alerts.every(isGrafanaTestAlert)) return { outcome: "ignored", reason: GRAFANA_TEST_REASON };

  return toAlertDelivery({
    source: badge,
    attachIdentity: `${badge}:${notification.groupKey}`,
    // Spec: a delivery with the same group key records a repeat whatever it carries, and the
    // router's repeat_interval re-sends an unchanged group, so a firing notification has no event
    // identifier. A resolved one is recorded once: a retried post of it is not a second recovery.
    eventId: resolved ? notificationDigest(notification.groupKey, notification.status, alerts) : "",
    kind: resolved ? "recovery" : "alert",
    title: label("alertname") ?? DEFAULT_TITLE,
    severity: severityForLabel(label("severity")),
    entity: serviceEntity(label("service"), label("job")),
    summary: annotation("summary"),
    link: first?.generatorUrl ?? asHttpUrl(notification.externalURL),
    alertRef: notification.groupKey,
    occurredAt: resolved ? latest(alerts.map((alert) => alert.endsAt)) : earliest(alerts.map((alert) => alert.startsAt)),
    runbookUrl: asHttpUrl(annotation("runbook_url")),
    data: compactJson({
      receiver: notification.receiver,
      status: notification.status,
      version: notification.version,
      externalURL: asHttpUrl(notification.externalURL),
      groupLabels: labelsJson(groupLabels),
      commonLabels: labelsJson(commonLabels),
      alertCount: alerts.length,
      truncatedAlerts: notification.truncatedAlerts,
      // A group can span several services while the entity names one; keep them all visible.
      services: [...new Set(alerts.flatMap((alert) => asText(alert.labels.get("service")) ?? []))].slice(0, 50),
      alerts: alerts.slice(0, MAX_ALERTS_KEPT).map((alert) =>
        compactJson({
          status: alert.status,
          fingerprint: alert.fingerprint,
          labels: labelsJson(alert.labels),
          startsAt: alert.startsAt ? new Date(timestampToMilliseconds(alert.startsAt)).toISOString() : undefined,
          endsAt: alert.endsAt ? new Date(timestampToMilliseconds(alert.endsAt)).toISOString() : undefined,
        }),
      ),
    }),
  });
}

export const GRAFANA_TEST_REASON = "Grafana contact-point test notification";

/**
 * The alert Grafana's contact-point Test button sends (its built-in test alert): a check of the
 * wiring, not an incident. A real alert named TestAlert from another instance is not one.
 */
function isGrafanaTestAlert(alert: RoutedAlert): boolean {
  return (
    alert.labels.get("alertname") === "TestAlert" && alert.labels.get("instance") === "Grafana" && alert.annotations.get("summary") === "Notification test"
  );
}

/** `critical` sev1, `page` sev2, anything else or none sev3. */
export function severityForLabel(severity: string | undefined): Severity {
  switch (severity?.toLowerCase()) {
    case "critical":
      return "sev1";
    case "page":
      return "sev2";
    default:
      return "sev3";
  }
}

function serviceEntity(service: string | undefined, job: string | undefined): EntityRef | undefined {
  const name = service ?? job;
  return name === undefined ? undefined : { kind: "service", id: name };
}

/**
 * The event identifier of a resolved notification: the digest of the group key, the status and
 * each alert's fingerprint, start and end is the same for a retried post, so it is not recorded
 * twice, and changes as soon as an alert joins, leaves, starts again or resolves. Alert order
 * does not matter.
 */
function notificationDigest(groupKey: string, status: string | undefined, alerts: readonly RoutedAlert[]): string {
  const alertKeys = alerts
    .map((alert) =>
      JSON.stringify([
        alert.fingerprint ?? canonicalLabels(alert.labels),
        alert.status ?? "",
        alert.startsAt ? canonicalInstant(alert.startsAt) : "",
        alert.endsAt ? canonicalInstant(alert.endsAt) : "",
      ]),
    )
    .sort();
  return digestOf([groupKey, status ?? "", ...alertKeys]);
}

function readAlert(value: unknown): RoutedAlert {
  return {
    status: asText(ownField(value, "status")),
    labels: stringEntries(ownField(value, "labels")),
    annotations: stringEntries(ownField(value, "annotations")),
    startsAt: routerTime(ownField(value, "startsAt")),
    endsAt: routerTime(ownField(value, "endsAt")),
    fingerprint: asText(ownField(value, "fingerprint")),
    generatorUrl: asHttpUrl(ownField(value, "generatorURL")),
  };
}

/** Unresolved alerts carry Go's zero time (`0001-01-01T00:00:00Z`) as `endsAt`: no time at all. */
function routerTime(value: unknown): Timestamp | undefined {
  const timestamp = parseDateTime(value);
  return timestamp === undefined || timestamp.seconds <= -62_135_596_800n ? undefined : timestamp;
}

function canonicalLabels(labels: Map<string, string>): string {
  return JSON.stringify([...labels.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

function labelsJson(labels: Map<string, string>): JsonObject {
  const json: JsonObject = {};
  for (const [key, value] of labels) if (key !== "__proto__") json[key] = value;
  return json;
}

function earliest(timestamps: readonly (Timestamp | undefined)[]): Timestamp | undefined {
  return pick(timestamps, (candidate, best) => compare(candidate, best) < 0);
}

function latest(timestamps: readonly (Timestamp | undefined)[]): Timestamp | undefined {
  return pick(timestamps, (candidate, best) => compare(candidate, best) > 0);
}

function pick(timestamps: readonly (Timestamp | undefined)[], better: (candidate: Timestamp, best: Timestamp) => boolean): Timestamp | undefined {
  let best: Timestamp | undefined;
  for (const timestamp of timestamps) {
    if (timestamp !== undefined && (best === undefined || better(timestamp, best))) best = timestamp;
  }
  return best;
}

function compare(a: Timestamp, b: Timestamp): number {
  if (a.seconds !== b.seconds) return a.seconds < b.seconds ? -1 : 1;
  return a.nanos - b.nanos;
}
