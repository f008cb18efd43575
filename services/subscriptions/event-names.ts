// The event types alone, without the payload builders: the console imports this list too.

/** Every event type a subscription may name, in the order the README documents them. */
export const EVENT_TYPES = [
  "incident.opened",
  "incident.repeat",
  "incident.recovery",
  "incident.no_data",
  "incident.severity_changed",
  "incident.acknowledged",
  "incident.owner_changed",
  "incident.note_added",
  "incident.unacknowledged",
  "incident.resolved",
  "incident.archived",
  "heartbeat.silent",
  "heartbeat.resumed",
  "comms.update_sent",
  "incident.investigation_completed",
] as const;
export type EventTypeName = (typeof EVENT_TYPES)[number];

export function isEventType(value: string): value is EventTypeName {
  return (EVENT_TYPES as readonly string[]).includes(value);
}
