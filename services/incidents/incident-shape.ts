import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { IncidentSchema, MaintenanceWindowSchema, TimelineEntrySchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Config } from "../runtime/config/config.js";
import type { IncidentRow, MaintenanceWindowRow, TimelineEntryRow } from "./store.js";
import { storableJson, storableText } from "../runtime/data/storable.js";

// Where incidents read them since they began here.
export { storableJson, storableText };

/** API shapes of the rows in store.ts. */

// record.ts and record-many.ts still import the row types from here.
export type { IncidentRow, MaintenanceWindowRow, TimelineEntryRow } from "./store.js";

export type IncidentInit = MessageInitShape<typeof IncidentSchema>;
export type TimelineEntryInit = MessageInitShape<typeof TimelineEntrySchema>;

/** The incident's war-room URL in the console, under PUBLIC_URL. */
export function workspaceUrl(config: Config, orgSlug: string, incidentId: string): string {
  return `${config.publicUrl}/o/${encodeURIComponent(orgSlug)}/incidents/${incidentId}`;
}

/** An incident row (with the timeline entries given) as the API answers it. */
export function incidentShape(config: Config, orgSlug: string, row: IncidentRow, timeline: TimelineEntryRow[] = []): IncidentInit {
  const incident: IncidentInit = {
    id: row.id,
    title: row.title,
    severity: row.severity,
    state: row.state,
    source: row.source,
    workspaceUrl: workspaceUrl(config, orgSlug, row.id),
    openedAt: timestampFromDate(row.opened_at),
    timeline: timeline.map(timelineEntryShape),
  };
  if (row.entity_kind !== null && row.entity_id !== null) incident.entity = { kind: row.entity_kind, id: row.entity_id };
  if (row.resolved_at) incident.resolvedAt = timestampFromDate(row.resolved_at);
  if (row.archived_at) incident.archivedAt = timestampFromDate(row.archived_at);
  if (row.runbook_url !== null) incident.runbookUrl = row.runbook_url;
  if (row.acknowledged_at) incident.acknowledgedAt = timestampFromDate(row.acknowledged_at);
  if (row.acknowledged_by) incident.acknowledgedBy = row.acknowledged_by;
  if (row.owner_id) incident.ownerId = row.owner_id;
  if (row.owner_email) incident.ownerEmail = row.owner_email;
  incident.repeatCount = row.repeat_count ?? 0;
  incident.lastActivityAt = timestampFromDate(row.last_activity_at ?? row.opened_at);
  incident.recoveredAtSource = row.recovered_at_source ?? false;
  if (row.correlation_group_id) incident.correlationGroupId = row.correlation_group_id;
  incident.correlationGroupSize = row.correlation_group_size ?? 0;
  return incident;
}

/** A timeline row as the API answers it, unset fields left out. */
export function timelineEntryShape(row: TimelineEntryRow): TimelineEntryInit {
  const entry: TimelineEntryInit = { kind: row.kind, at: timestampFromDate(row.at) };
  if (row.summary !== null) entry.summary = row.summary;
  if (row.link !== null) entry.link = row.link;
  if (row.alert_ref !== null) entry.alertRef = row.alert_ref;
  if (row.event_id !== null) entry.eventId = row.event_id;
  if (row.data !== null) entry.data = row.data;
  return entry;
}

/** A maintenance-window row as the API answers it. */
export function maintenanceWindowShape(row: MaintenanceWindowRow): MessageInitShape<typeof MaintenanceWindowSchema> {
  return {
    id: row.id,
    startsAt: timestampFromDate(row.starts_at),
    endsAt: timestampFromDate(row.ends_at),
    reason: row.reason,
    match: { sources: row.sources, entities: row.entities.map((e) => ({ kind: e.kind, id: e.id })) },
  };
}

/**
 * The data of an entry that is not the opening one: its `at` is when the delivery arrived (the
 * database clock), so the time the sender gave (an alert's start, a message's timestamp) is kept
 * here as `occurredAt`. Without it, a repeat 11 s after the first alert would read as recorded in
 * the same second as `opened`.
 */
export function withSenderTime<T extends JsonObject | null>(data: T, occurredAt: Date | null): T | JsonObject {
  if (!occurredAt) return data;
  return { ...(data ?? {}), occurredAt: occurredAt.toISOString() };
}
