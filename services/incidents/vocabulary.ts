/** The fixed words of the incident core: source badges, delivery kinds, states, timeline kinds. */

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
export type SourceBadge = (typeof SOURCE_BADGES)[number];

export const SEVERITIES = ["sev1", "sev2", "sev3", "sev4"] as const;

/**
 * What a delivery is: an alert opens or repeats; the others only record on an open incident.
 * `acknowledge` (PagerDuty, Opsgenie) and `change` (PagerDuty change events) come only from the
 * drop-in receivers; neither changes the incident's state.
 */
export const ALERT_KINDS = ["alert", "recovery", "no_data", "resumed", "acknowledge", "change"] as const;
export type AlertKind = (typeof ALERT_KINDS)[number];

export const INCIDENT_STATES = ["open", "resolved", "archived"] as const;
export type IncidentState = (typeof INCIDENT_STATES)[number];

/** The timeline entry a delivery of each kind writes on an incident that is already open. */
export const ENTRY_KIND_OF_DELIVERY: Record<AlertKind, string> = {
  alert: "repeat",
  recovery: "recovery",
  no_data: "no_data",
  resumed: "resumed",
  acknowledge: "acknowledged",
  change: "change",
};

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
} as const;

/** Whether `value` is one of `values`, narrowing its type. */
export function isOneOf<T extends string>(values: readonly T[], value: string): value is T {
  return (values as readonly string[]).includes(value);
}
