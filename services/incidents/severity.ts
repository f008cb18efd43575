import type { ServiceImpl } from "@connectrpc/connect";
import type { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { currentTraceparent } from "../runtime/observability/tracing.js";
import type { IncidentsDeps } from "./deps.js";
import { outboxRows } from "./domain-events.js";
import { incidentWithFirstPage, loadIncident } from "./list-and-get.js";
import type { ClockRow, IncidentIdRow, IncidentStateRow } from "./store.js";
import { AUDIT_KINDS, isOneOf, SEVERITIES } from "../domain/vocabulary.js";

/**
 * A delivery's severity is only a proposal; a person sets the one that counts. The change, its
 * timeline entry `severity_changed` {from, to, actor}, its domain event and its audit record are
 * one statement. Deliveries never write severity once an incident is open (a repeat attaches and
 * records), so a later repeat cannot put the proposal back. The value is checked after the caller's
 * credential, as every refusal here is.
 */
export function createSeverityHandlers(
  deps: Pick<IncidentsDeps, "sql" | "config" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IncidentsService>, "updateIncident"> {
  const { sql, config, clients, outbox } = deps;
  return {
    async updateIncident(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (!isOneOf(SEVERITIES, req.severity)) throw new InvalidArgumentError(`severity must be one of ${SEVERITIES.join(", ")}`);
      if (!isUuid(req.id)) throw new NotFoundError("no such incident");
      const actor = principal.email;
      const to = req.severity;
      for (let turn = 0; ; turn++) {
        if (turn === 4) throw new UnavailableError("the incident kept changing; retry");
        const [current] = await sql<(IncidentStateRow & ClockRow & { severity: string })[]>`
          select state, severity, now() as now from incidents.incidents where id = ${req.id} and org_id = ${principal.orgId}`;
        if (!current) throw new NotFoundError("no such incident");
        // Setting the severity it has records nothing (a retried click).
        if (current.severity === to) break;
        if (current.state === "archived") throw new FailedPreconditionError("the incident is archived; its severity no longer changes");
        const from = current.severity;
        const at = current.now;
        const event = outboxRows.severityChanged({ orgId: principal.orgId, incidentId: req.id, from, to, actor, at });
        const recorded = outboxRows.timelineRecorded({ orgId: principal.orgId, incidentId: req.id, kind: "severity_changed", at });
        const audit = outboxRows.audit({ orgId: principal.orgId, kind: AUDIT_KINDS.severityChanged, actor, at, data: { incidentId: req.id, from, to } });
        // A compare-and-set on the severity and state just read: a concurrent change that got
        // there first writes nothing here, and the incident is read again.
        const changed = await sql<IncidentIdRow[]>`
          with changed as (
            update incidents.incidents set severity = ${to}::text
            where id = ${req.id} and org_id = ${principal.orgId} and severity = ${from}::text and state = ${current.state}::text
            returning id
          ), entry as (
            insert into incidents.timeline_entries (incident_id, kind, at, summary, data)
            select id, 'severity_changed', ${at}::timestamptz, ${`Severity ${from} → ${to} by ${actor}`}::text,
                   ${sql.json({ from, to, actor })}::jsonb from changed
          ), events as (
            insert into incidents.outbox (subject, payload, trace_context)
            select subject, payload, ${currentTraceparent()}::text
            from (values (${event.subject}::text, ${event.payload}::bytea), (${recorded.subject}::text, ${recorded.payload}::bytea),
                         (${audit.subject}::text, ${audit.payload}::bytea)) as e (subject, payload)
            where exists (select 1 from changed)
          )
          select id from changed`;
        if (changed.length > 0) {
          outbox.poke();
          break;
        }
      }
      return incidentWithFirstPage(config, principal.orgSlug, await loadIncident(sql, principal.orgId, req.id));
    },
  };
}
