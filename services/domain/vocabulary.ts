import { AlertSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { allowedValues } from "../runtime/schema-rules.js";

// The fixed words of the incident core: source badges, delivery kinds, states, timeline kinds.
//
// Delivery kinds and severities are written once, as the `string.in` rules of the schema's Alert
// (proto/warroom/incidents/v1/incidents.proto), and read from there. Source badges are open: the
// built-in ones below, and each custom source's name (intake refuses a name equal to a built-in).
export const SOURCE_BADGES = [
  "metrics-monitor",
  "cloud-monitor",
  "log-analytics",
  "error-tracker",
  "remote",
  "alert-router",
  "chat",
  "heartbeat",
  "pagerduty-events",
  "opsgenie",
] as const;
export type SourceBadge = string;

/** The characters a custom source's name (its badge) may have: the schema's rule on Alert.source. */
export const CUSTOM_BADGE_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** Whether `value` can be a source badge: a built-in one or a custom source's name. */
export function isSourceBadge(value: string): boolean {
  return (SOURCE_BADGES as readonly string[]).includes(value) || CUSTOM_BADGE_PATTERN.test(value);
}

export const SEVERITIES = allowedValues(AlertSchema.field.severity);

export type AlertKind = string;

export const INCIDENT_STATES = ["open", "resolved", "archived"] as const;
export type IncidentState = (typeof INCIDENT_STATES)[number];

const ENTRY_KIND_OTHER_THAN_DELIVERY_KIND: Readonly<Record<string, string>> = { alert: "repeat", acknowledge: "acknowledged" };

/** The timeline entry a delivery of this kind writes on an incident that is already open. */
export function entryKindOfDelivery(kind: AlertKind): string {
  return ENTRY_KIND_OTHER_THAN_DELIVERY_KIND[kind] ?? kind;
}

/** Entries other services append through AppendTimeline (never a delivery, never a state change). */
export const APPENDABLE_ENTRY_KINDS = ["update_sent", "update_simulated", "investigation"] as const;

export const OUTCOMES = {
  opened: "opened",
  attached: "attached",
  recorded: "recorded",
  ignored: "ignored",
  suppressed: "suppressed",
} as const;

export const AUDIT_KINDS = {
  triggerSuppressed: "trigger.suppressed",
  maintenanceWindowCreated: "maintenance_window.created",
  maintenanceWindowDeleted: "maintenance_window.deleted",
  maintenanceWindowEnded: "maintenance_window.ended",
  severityChanged: "incident.severity_changed",
  incidentAcknowledged: "incident.acknowledged",
  ownerChanged: "incident.owner_changed",
  escalationPolicyChanged: "escalation_policy.changed",
} as const;

/** Whether `value` is one of `values`, narrowing its type. */
export function isOneOf<T extends string>(values: readonly T[], value: string): value is T {
  return (values as readonly string[]).includes(value);
}
