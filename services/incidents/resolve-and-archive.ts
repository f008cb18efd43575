import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { ArchiveIncidentRequest, IncidentsService, ResolveIncidentRequest } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/auth.js";
import type { Clients } from "../runtime/clients.js";
import type { Config } from "../runtime/config.js";
import type { Sql, TransactionSql } from "../runtime/database.js";
import { ConflictError, NotFoundError } from "../runtime/errors.js";
import type { Outbox } from "../runtime/outbox.js";
import type { IncidentEvents } from "./domain-events.js";
import { incidentShape, isUuid, type IncidentRow } from "./incident-shape.js";
import { loadIncident } from "./list-and-get.js";

/**
 * Only a person resolves or archives. Open -> resolved, open -> archived, resolved -> archived.
 * Asking for the state an incident is already in answers it unchanged (a retried click records
 * nothing twice); resolving an archived incident is a conflict. Once out of `open`, the incident
 * leaves the partial unique index, so the next matching delivery opens a new one.
 */
export function createResolveAndArchiveHandlers(deps: {
  sql: Sql;
  config: Config;
  clients: Clients;
  outbox: Outbox;
  events: IncidentEvents;
}): Pick<ServiceImpl<typeof IncidentsService>, "resolveIncident" | "archiveIncident"> {
  const { sql, config, clients, outbox, events } = deps;

  async function moveTo(target: "resolved" | "archived", req: ResolveIncidentRequest | ArchiveIncidentRequest, context: HandlerContext) {
    const principal = await authorize(clients, context, req.org, ANY_MEMBER);
    if (!isUuid(req.id)) throw new NotFoundError("no such incident");
    const changed = await sql.begin(async (tx) => {
      const row = await transition(tx, target, principal.orgId, req.id, principal.email);
      if (!row) {
        const [current] = await tx<{ state: string }[]>`select state from incidents.incidents where id = ${req.id} and org_id = ${principal.orgId}`;
        if (!current) throw new NotFoundError("no such incident");
        if (current.state === target) return false;
        throw new ConflictError("the incident is archived; an archived incident cannot be resolved");
      }
      const at = target === "resolved" ? row.resolved_at! : row.archived_at!;
      const verb = target === "resolved" ? "Resolved" : "Archived";
      await tx`
        insert into incidents.timeline_entries (incident_id, kind, at, summary, data)
        values (${row.id}, ${target}, ${at}, ${`${verb} by ${principal.email}`}, ${sql.json({ actor: principal.email })})`;
      await Promise.all([
        events.resolved(tx, { orgId: principal.orgId, incidentId: row.id, state: target, actor: principal.email, at }),
        events.timelineRecorded(tx, { orgId: principal.orgId, incidentId: row.id, kind: target, at }),
      ]);
      return true;
    });
    if (changed) outbox.poke();
    const { row, timeline } = await loadIncident(sql, principal.orgId, req.id);
    return incidentShape(config, principal.orgSlug, row, timeline);
  }

  /** The conditional update: it takes effect only from an allowed state, whoever races it. */
  async function transition(tx: TransactionSql, target: "resolved" | "archived", orgId: string, id: string, actor: string): Promise<IncidentRow | undefined> {
    const [row] =
      target === "resolved"
        ? await tx<IncidentRow[]>`
            update incidents.incidents set state = 'resolved', resolved_at = clock_timestamp(), resolved_by = ${actor}
            where id = ${id} and org_id = ${orgId} and state = 'open' returning *`
        : await tx<IncidentRow[]>`
            update incidents.incidents set state = 'archived', archived_at = clock_timestamp(), archived_by = ${actor}
            where id = ${id} and org_id = ${orgId} and state in ('open', 'resolved') returning *`;
    return row;
  }

  return {
    resolveIncident: (req: ResolveIncidentRequest, context: HandlerContext) => moveTo("resolved", req, context),
    archiveIncident: (req: ArchiveIncidentRequest, context: HandlerContext) => moveTo("archived", req, context),
  };
}
