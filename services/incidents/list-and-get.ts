import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  GetIncidentRequest,
  IncidentStateRequest,
  IncidentsService,
  ListIncidentsRequest,
  ListTimelineRequest,
} from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/auth.js";
import type { Config } from "../runtime/config.js";
import type { Sql } from "../runtime/database.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { incidentShape, timelineEntryShape, type IncidentInit } from "./incident-shape.js";
import type { IncidentIdRow, IncidentRow, IncidentStateRow, TimelineEntryRow, TimelinePageRow } from "./store.js";
import { INCIDENT_STATES, isOneOf } from "./vocabulary.js";
import type { IncidentsDeps } from "./deps.js";

const DEFAULT_LIMIT = 100;
const MAX_LIMIT = 1000;

/**
 * Timeline pages. An entry is bounded by intake (summary 8 KiB, each string in `data` 8 KiB, a
 * few fields), so a page of 500 stays well inside the internal message limit (16 MiB); the first
 * page, carried by the incident itself, holds 100.
 */
export const TIMELINE_PAGE_SIZE = 100;
export const TIMELINE_MAX_PAGE_SIZE = 500;

/**
 * Cursors are opaque to callers: the position after which the next page starts, so a page never
 * repeats or skips an entry that was recorded meanwhile.
 */
function encodeCursor(kind: "t" | "i", value: string): string {
  return Buffer.from(`${kind}:${value}`).toString("base64url");
}

function decodeCursor(kind: "t" | "i", cursor: string): string {
  const text = Buffer.from(cursor, "base64url").toString();
  if (!text.startsWith(`${kind}:`)) throw new InvalidArgumentError("cursor is not one this list gave");
  const value = text.slice(2);
  if (kind === "t" ? !/^\d{1,19}$/.test(value) : !isUuid(value)) throw new InvalidArgumentError("cursor is not one this list gave");
  return value;
}

/** One page of an incident's timeline, oldest first, after the cursor's entry. */
async function timelinePage(
  sql: Sql,
  incidentId: string,
  after: string | undefined,
  limit: number,
): Promise<{ entries: TimelineEntryRow[]; nextCursor?: string }> {
  const rows = await sql<TimelinePageRow[]>`
    select id, kind, at, summary, link, alert_ref, event_id, data from incidents.timeline_entries
    where incident_id = ${incidentId} and id > ${after ?? "0"}::bigint order by id limit ${limit + 1}`;
  if (rows.length <= limit) return { entries: rows };
  const entries = rows.slice(0, limit);
  return { entries, nextCursor: encodeCursor("t", String(entries.at(-1)!.id)) };
}

/** An incident of the organization with the first page of its timeline, in recording order; 404 otherwise. */
export async function loadIncident(
  sql: Sql,
  orgId: string,
  id: string,
): Promise<{ row: IncidentRow; timeline: TimelineEntryRow[]; timelineNextCursor?: string }> {
  if (!isUuid(id)) throw new NotFoundError("no such incident");
  const [row] = await sql<IncidentRow[]>`select * from incidents.incidents where id = ${id} and org_id = ${orgId}`;
  if (!row) throw new NotFoundError("no such incident");
  const page = await timelinePage(sql, id, undefined, TIMELINE_PAGE_SIZE);
  return { row, timeline: page.entries, ...(page.nextCursor ? { timelineNextCursor: page.nextCursor } : {}) };
}

/** The incident as read: its first timeline page, and the cursor to the rest when there is more. */
export function incidentWithFirstPage(config: Config, orgSlug: string, loaded: Awaited<ReturnType<typeof loadIncident>>): IncidentInit {
  const incident = incidentShape(config, orgSlug, loaded.row, loaded.timeline);
  if (loaded.timelineNextCursor) incident.timelineNextCursor = loaded.timelineNextCursor;
  return incident;
}

/**
 * The read handlers: list and get incidents, page through a timeline, and the internal
 * IncidentState.
 */
export function createListAndGetHandlers(
  deps: Pick<IncidentsDeps, "sql" | "config" | "clients">,
): Pick<ServiceImpl<typeof IncidentsService>, "listIncidents" | "getIncident" | "listTimeline" | "incidentState"> {
  const { sql, config, clients } = deps;
  return {
    async listIncidents(req: ListIncidentsRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (req.state && !isOneOf(INCIDENT_STATES, req.state)) throw new InvalidArgumentError("state must be open, resolved or archived");
      const limit = req.limit === 0 ? DEFAULT_LIMIT : req.limit;
      if (limit < 1 || limit > MAX_LIMIT) throw new InvalidArgumentError(`limit must be between 1 and ${MAX_LIMIT}`);
      // Newest first; a page continues strictly after the (opened_at, id) of the cursor's incident.
      const after = req.cursor ? decodeCursor("i", req.cursor) : undefined;
      const afterClause = after
        ? sql`and (opened_at, id) < (select opened_at, id from incidents.incidents where id = ${after} and org_id = ${principal.orgId})`
        : sql``;
      const stateClause = req.state ? sql`and state = ${req.state}` : sql``;
      const rows = await sql<IncidentRow[]>`
        select * from incidents.incidents where org_id = ${principal.orgId} ${stateClause} ${afterClause}
        order by opened_at desc, id desc limit ${limit + 1}`;
      const page = rows.slice(0, limit);
      return {
        incidents: page.map((row) => incidentShape(config, principal.orgSlug, row)),
        ...(rows.length > limit ? { nextCursor: encodeCursor("i", page.at(-1)!.id) } : {}),
      };
    },

    async getIncident(req: GetIncidentRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return incidentWithFirstPage(config, principal.orgSlug, await loadIncident(sql, principal.orgId, req.id));
    },

    async incidentState(req: IncidentStateRequest) {
      if (!isUuid(req.incidentId) || !isUuid(req.orgId)) return { state: "" };
      if (req.withIncident) {
        const [row] = await sql<IncidentIdRow[]>`select id from incidents.incidents where id = ${req.incidentId} and org_id = ${req.orgId}`;
        if (!row) return { state: "" };
        const loaded = await loadIncident(sql, req.orgId, req.incidentId);
        return { state: loaded.row.state, incident: incidentWithFirstPage(config, "", loaded) };
      }
      const [row] = await sql<IncidentStateRow[]>`select state from incidents.incidents where id = ${req.incidentId} and org_id = ${req.orgId}`;
      return { state: row?.state ?? "" };
    },

    async listTimeline(req: ListTimelineRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const limit = req.limit === 0 ? TIMELINE_PAGE_SIZE : req.limit;
      if (limit < 1 || limit > TIMELINE_MAX_PAGE_SIZE) throw new InvalidArgumentError(`limit must be between 1 and ${TIMELINE_MAX_PAGE_SIZE}`);
      const after = req.cursor ? decodeCursor("t", req.cursor) : undefined;
      if (!isUuid(req.id)) throw new NotFoundError("no such incident");
      const [row] = await sql<IncidentIdRow[]>`select id from incidents.incidents where id = ${req.id} and org_id = ${principal.orgId}`;
      if (!row) throw new NotFoundError("no such incident");
      const page = await timelinePage(sql, req.id, after, limit);
      return { entries: page.entries.map(timelineEntryShape), ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) };
    },
  };
}
