import type { ServiceImpl } from "@connectrpc/connect";
import type { AppendTimelineRequest, IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { outboxRows } from "./domain-events.js";
import { isUuid } from "../runtime/ids.js";
import { storableJson, storableText, timelineEntryShape } from "./incident-shape.js";
import type { ClockRow, TimelineEntryRow } from "./store.js";
import { APPENDABLE_ENTRY_KINDS, isOneOf } from "../domain/vocabulary.js";
import { currentTraceparent } from "../runtime/observability/tracing.js";
import type { IncidentsDeps } from "./deps.js";

const MAX_SUMMARY_CHARACTERS = 65536;
const MAX_REFERENCE_CHARACTERS = 8192;

/**
 * AppendTimeline: entries that are not deliveries (an update sent to a channel, or recorded as
 * simulated while real egress is off). Allowed in any state: an update may follow a resolve.
 */
export function createAppendTimelineHandlers(deps: Pick<IncidentsDeps, "sql" | "outbox">): Pick<ServiceImpl<typeof IncidentsService>, "appendTimeline"> {
  const { sql, outbox } = deps;
  return {
    async appendTimeline(req: AppendTimelineRequest) {
      const entry = req.entry;
      if (!entry) throw new InvalidArgumentError("entry is required");
      if (!isOneOf(APPENDABLE_ENTRY_KINDS, entry.kind)) {
        throw new InvalidArgumentError(`entry.kind must be one of ${APPENDABLE_ENTRY_KINDS.join(", ")}`);
      }
      if ((entry.summary?.length ?? 0) > MAX_SUMMARY_CHARACTERS) throw new InvalidArgumentError(`entry.summary is longer than ${MAX_SUMMARY_CHARACTERS}`);
      for (const [name, value] of [
        ["link", entry.link],
        ["alertRef", entry.alertRef],
        ["eventId", entry.eventId],
      ] as const) {
        if ((value?.length ?? 0) > MAX_REFERENCE_CHARACTERS) throw new InvalidArgumentError(`entry.${name} is longer than ${MAX_REFERENCE_CHARACTERS}`);
      }
      if (!isUuid(req.incidentId)) throw new NotFoundError("no such incident");
      const text = (value: string | undefined) => (value === undefined ? null : storableText(value));
      const data = entry.data && Object.keys(entry.data).length > 0 ? sql.json(storableJson(entry.data)) : null;
      const [clock] = await sql<ClockRow[]>`select now() as now`;
      const at = clock!.now;
      const recorded = outboxRows.timelineRecorded({ orgId: req.orgId, incidentId: req.incidentId, kind: entry.kind, at });
      const eventId = text(entry.eventId);
      // An entry with an event id is recorded once: a caller's retry (comms re-writes an update
      // whose first write it could not confirm) gets the entry that is already there.
      const [row] = await sql<TimelineEntryRow[]>`
        with incident as (
          select id from incidents.incidents where id = ${req.incidentId} and org_id = ${req.orgId}
        ), entry as (
          insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data)
          select id, ${entry.kind}::text, ${at}::timestamptz, ${text(entry.summary)}::text, ${text(entry.link)}::text,
                 ${text(entry.alertRef)}::text, ${eventId}::text, ${data}::jsonb
          from incident
          on conflict (incident_id, event_id) where event_id is not null do nothing
          returning kind, at, summary, link, alert_ref, event_id, data
        ), events as (
          insert into incidents.outbox (subject, payload, trace_context)
          select ${recorded.subject}::text, ${recorded.payload}::bytea, ${currentTraceparent()}::text where exists (select 1 from entry)
        )
        select * from entry
        union all
        select t.kind, t.at, t.summary, t.link, t.alert_ref, t.event_id, t.data
        from incidents.timeline_entries t join incident i on i.id = t.incident_id
        where ${eventId}::text is not null and t.event_id = ${eventId}::text and not exists (select 1 from entry)
        limit 1`;
      if (row) {
        outbox.poke();
        return timelineEntryShape(row);
      }
      // A concurrent append of the same event id committed after this statement's snapshot.
      const [existing] = eventId
        ? await sql<TimelineEntryRow[]>`
            select t.kind, t.at, t.summary, t.link, t.alert_ref, t.event_id, t.data
            from incidents.timeline_entries t join incidents.incidents i on i.id = t.incident_id
            where i.id = ${req.incidentId} and i.org_id = ${req.orgId} and t.event_id = ${eventId}
            limit 1`
        : [];
      if (!existing) throw new NotFoundError("no such incident");
      return timelineEntryShape(existing);
    },
  };
}
