import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { ArchiveIncidentRequest, IncidentsService, ResolveIncidentRequest } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { FailedPreconditionError, NotFoundError, UnavailableError } from "../runtime/errors.js";
import { outboxRows } from "./domain-events.js";
import { isUuid } from "../runtime/ids.js";
import { incidentWithFirstPage, loadIncident } from "./list-and-get.js";
import type { ClockRow, IncidentIdRow, IncidentStateRow } from "./store.js";
import { currentTraceparent } from "../runtime/observability/tracing.js";
import type { IncidentsDeps } from "./deps.js";
import type { ActionOutcome, Actor } from "./respond.js";

export type Target = "resolved" | "archived";

/** The states each target may be reached from. */
const FROM: Record<Target, string[]> = { resolved: ["open"], archived: ["open", "resolved"] };

/**
 * Only a person resolves or archives. Open -> resolved, open -> archived, resolved -> archived.
 * Asking for the state an incident is already in answers "unchanged" (a retried click records
 * nothing twice); resolving an archived incident is a conflict. Once out of `open`, the incident's
 * `open_identity` is null and it leaves the unique index, so the next matching delivery opens a new
 * one. Shared by the single-incident RPCs and the bulk action.
 */
export function createStateMoves(deps: Pick<IncidentsDeps, "sql" | "outbox">) {
  const { sql, outbox } = deps;
  return async function moveTo(target: Target, actor: Actor, id: string): Promise<ActionOutcome> {
    if (!isUuid(id)) throw new NotFoundError("no such incident");
    for (let turn = 0; turn < 4; turn++) {
      const [current] = await sql<(IncidentStateRow & ClockRow)[]>`
        select state, now() as now from incidents.incidents where id = ${id} and org_id = ${actor.orgId}`;
      if (!current) throw new NotFoundError("no such incident");
      if (current.state === target) return "unchanged";
      if (!FROM[target].includes(current.state)) throw new FailedPreconditionError("the incident is archived; an archived incident cannot be resolved");

      // A compare-and-set on the state just read: if a concurrent resolve or archive got there
      // first, nothing is written and the state is read again. The update waits for deliveries
      // holding a share lock on the incident, so their entries come before this one.
      const at = current.now;
      const resolved = outboxRows.resolved({ orgId: actor.orgId, incidentId: id, state: target, actor: actor.email, at });
      const recorded = outboxRows.timelineRecorded({ orgId: actor.orgId, incidentId: id, kind: target, at });
      const summary = `${target === "resolved" ? "Resolved" : "Archived"} by ${actor.email}`;
      const moved = await sql<IncidentIdRow[]>`
        with moved as (
          update incidents.incidents set
            state = ${target}::text,
            resolved_at = case when ${target}::text = 'resolved' then ${at}::timestamptz else resolved_at end,
            resolved_by = case when ${target}::text = 'resolved' then ${actor.email}::text else resolved_by end,
            archived_at = case when ${target}::text = 'archived' then ${at}::timestamptz else archived_at end,
            archived_by = case when ${target}::text = 'archived' then ${actor.email}::text else archived_by end
          where id = ${id} and org_id = ${actor.orgId} and state = ${current.state}
          returning id
        ), entry as (
          insert into incidents.timeline_entries (incident_id, kind, at, summary, data)
          select id, ${target}::text, ${at}::timestamptz, ${summary}::text, ${sql.json({ actor: actor.email })}::jsonb from moved
        ), events as (
          insert into incidents.outbox (subject, payload, trace_context)
          select subject, payload, ${currentTraceparent()}::text from (values (${resolved.subject}::text, ${resolved.payload}::bytea), (${recorded.subject}::text, ${recorded.payload}::bytea)) as e (subject, payload)
          where exists (select 1 from moved)
        )
        select id from moved`;
      if (moved.length > 0) {
        outbox.poke();
        return "done";
      }
    }
    throw new UnavailableError("the incident kept changing; retry");
  };
}

/** The single-incident resolve and archive RPCs. */
export function createResolveAndArchiveHandlers(
  deps: Pick<IncidentsDeps, "sql" | "config" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IncidentsService>, "resolveIncident" | "archiveIncident"> {
  const { sql, config, clients } = deps;
  const moveTo = createStateMoves(deps);

  async function moveOne(target: Target, req: ResolveIncidentRequest | ArchiveIncidentRequest, context: HandlerContext) {
    const principal = await authorize(clients, context, req.org, ANY_MEMBER);
    await moveTo(target, { orgId: principal.orgId, email: principal.email }, req.id);
    return incidentWithFirstPage(config, principal.orgSlug, await loadIncident(sql, principal.orgId, req.id));
  }

  return {
    resolveIncident: (req: ResolveIncidentRequest, context: HandlerContext) => moveOne("resolved", req, context),
    archiveIncident: (req: ArchiveIncidentRequest, context: HandlerContext) => moveOne("archived", req, context),
  };
}
