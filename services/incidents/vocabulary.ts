import { AlertSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { allowedValues } from "../runtime/schema-rules.js";

// The fixed words of the incident core: source badges, delivery kinds, states, timeline kinds.
//
// Source badges, delivery kinds and severities are written once, as the `string.in` rules of the
// schema's Alert (proto/warroom/incidents/v1/incidents.proto), and read from there.
export const SOURCE_BADGES = allowedValues(AlertSchema.field.source);
export type SourceBadge = string;

export const SEVERITIES = allowedValues(AlertSchema.field.severity);

/** What a delivery is: an alert opens or repeats; the others only record on an open incident. */
export const ALERT_KINDS = allowedValues(AlertSchema.field.kind);
export type AlertKind = string;

export const INCIDENT_STATES = ["open", "resolved", "archived"] as const;
export type IncidentState = (typeof INCIDENT_STATES)[number];

const ENTRY_KIND_OTHER_THAN_DELIVERY_KIND: Readonly<Record<string, string>> = { alert: "repeat", acknowledge: "acknowledged" };

/** The timeline entry a delivery of this kind writes on an incident that is already open. */
export function entryKindOfDelivery(kind: AlertKind): string {
  return ENTRY_KIND_OTHER_THAN_DELIVERY_KIND[kind] ?? kind;
}

/** Entries other services append through AppendTimeline (never a delivery, never a state change). */
export const APPENDABLE_ENTRY_KINDS = ["update_sent", "update_simulated"] as const;

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
  severityChanged: "incident.severity_changed",
} as const;

/** Whether `value` is one of `values`, narrowing its type. */
export function isOneOf<T extends string>(values: readonly T[], value: string): value is T {
  return (values as readonly string[]).includes(value);
}
