import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { GetIncidentRequest, IncidentsService, ListIncidentsRequest } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/auth.js";
import type { Clients } from "../runtime/clients.js";
import type { Config } from "../runtime/config.js";
import type { Sql } from "../runtime/database.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { incidentShape, type IncidentRow, type TimelineEntryRow } from "./incident-shape.js";
import { INCIDENT_STATES, isOneOf } from "./vocabulary.js";

const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 1000;

/** An incident of the organization with its whole timeline, in recording order; 404 otherwise. */
export async function loadIncident(sql: Sql, orgId: string, id: string): Promise<{ row: IncidentRow; timeline: TimelineEntryRow[] }> {
  if (!isUuid(id)) throw new NotFoundError("no such incident");
  const [row] = await sql<IncidentRow[]>`select * from incidents.incidents where id = ${id} and org_id = ${orgId}`;
  if (!row) throw new NotFoundError("no such incident");
  const timeline = await sql<TimelineEntryRow[]>`
    select kind, at, summary, link, alert_ref, event_id, data from incidents.timeline_entries
    where incident_id = ${id} order by id`;
  return { row, timeline };
}

export function createListAndGetHandlers(deps: { sql: Sql; config: Config; clients: Clients }): Pick<ServiceImpl<typeof IncidentsService>, "listIncidents" | "getIncident"> {
  const { sql, config, clients } = deps;
  return {
    async listIncidents(req: ListIncidentsRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (req.state && !isOneOf(INCIDENT_STATES, req.state)) throw new InvalidArgumentError("state must be open, resolved or archived");
      const limit = req.limit === 0 ? DEFAULT_LIMIT : req.limit;
      if (limit < 1 || limit > MAX_LIMIT) throw new InvalidArgumentError(`limit must be between 1 and ${MAX_LIMIT}`);
      const rows = req.state
        ? await sql<IncidentRow[]>`
            select * from incidents.incidents where org_id = ${principal.orgId} and state = ${req.state}
            order by opened_at desc, id desc limit ${limit}`
        : await sql<IncidentRow[]>`
            select * from incidents.incidents where org_id = ${principal.orgId}
            order by opened_at desc, id desc limit ${limit}`;
      return { incidents: rows.map((row) => incidentShape(config, principal.orgSlug, row)) };
    },

    async getIncident(req: GetIncidentRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const { row, timeline } = await loadIncident(sql, principal.orgId, req.id);
      return incidentShape(config, principal.orgSlug, row, timeline);
    },
  };
}
