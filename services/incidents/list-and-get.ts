import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  GetIncidentRequest,
  IncidentStateRequest,
  IncidentsService,
  ListIncidentsRequest,
  ListTimelineRequest,
  RelatedIncidentSchema,
} from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import type { Config } from "../runtime/config/config.js";
import type { Sql } from "../runtime/data/database.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { nextEscalation, type EscalationDeadlineInit } from "./escalation/escalation-policy.js";
import { incidentShape, timelineEntryShape, type IncidentInit } from "./incident-shape.js";
import type { IncidentIdRow, IncidentRow, IncidentStateRow, TimelineEntryRow, TimelinePageRow } from "./store.js";
import { INCIDENT_STATES, isOneOf, SEVERITIES } from "../domain/vocabulary.js";

function invalid(message: string): never {
  throw new InvalidArgumentError(message);
}
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
 * An incident with what its timeline says of it: how many repeats, the time of its latest entry,
 * and whether the source's latest word (opened, repeat or recovery) was a recovery. Each is a walk
 * of the index (incident_id, kind, id) or (incident_id, id) of one incident; the repeat count
 * reads one index entry per repeat.
 */
function incidentRead(sql: Sql) {
  return sql`
    i.*,
    (select count(*) from incidents.timeline_entries t where t.incident_id = i.id and t.kind = 'repeat')::int as repeat_count,
    (select t.at from incidents.timeline_entries t where t.incident_id = i.id order by t.id desc limit 1) as last_activity_at,
    ${recoveredAtSource(sql)} as recovered_at_source,
    (case when i.correlation_group_id is null then 0 else (select count(*) from incidents.incidents g
      where g.org_id = i.org_id and g.correlation_group_id = i.correlation_group_id) end)::int as correlation_group_size`;
}

/** Whether the source's latest word on incident `i` (opened, repeat or recovery) was a recovery. */
function recoveredAtSource(sql: Sql) {
  return sql`coalesce(
      (select max(t.id) from incidents.timeline_entries t where t.incident_id = i.id and t.kind = 'recovery') >
      greatest(
        (select max(t.id) from incidents.timeline_entries t where t.incident_id = i.id and t.kind = 'repeat'),
        (select max(t.id) from incidents.timeline_entries t where t.incident_id = i.id and t.kind = 'opened')
      ),
      false
    )`;
}

/** The filters the list and the bulk action share (ListIncidentsRequest's, IncidentFilter's). */
export interface IncidentFilterFields {
  state: string;
  severity: string;
  source: string;
  entityKind: string;
  entityId: string;
  acknowledged: string;
  ownerId: string;
  q: string;
  recovered: string;
  /** The list's alone: the incidents of one correlation group. */
  correlationGroupId?: string;
}

/**
 * The where clause over `incidents.incidents i` of the organization's incidents matching the
 * filter; InvalidArgument naming the field and what it takes otherwise.
 */
export function incidentFilterWhere(sql: Sql, orgId: string, filter: IncidentFilterFields) {
  if (filter.state && !isOneOf(INCIDENT_STATES, filter.state)) invalid("state must be open, resolved or archived");
  const severities = filter.severity === "" ? [] : filter.severity.split(",").map((v) => v.trim());
  for (const severity of severities) {
    if (!isOneOf(SEVERITIES, severity)) invalid(`severity must be a comma-separated list of ${SEVERITIES.join(", ")}`);
  }
  if (filter.acknowledged !== "" && filter.acknowledged !== "yes" && filter.acknowledged !== "no") invalid("acknowledged must be yes or no");
  if (filter.recovered !== "" && filter.recovered !== "yes" && filter.recovered !== "no") invalid("recovered must be yes or no");
  if (filter.ownerId !== "" && filter.ownerId !== "none" && !isUuid(filter.ownerId)) invalid("ownerId must be a member's id (GET /o/{org}/members) or none");
  if (filter.correlationGroupId && !isUuid(filter.correlationGroupId)) invalid("correlationGroupId must be an incident's correlationGroupId");
  if (filter.entityKind !== "" && filter.entityId === "") invalid("entityKind needs entityId: filter by the entity's id, and its kind if you like");

  const clauses = [
    filter.state ? sql`and i.state = ${filter.state}` : sql``,
    severities.length > 0 ? sql`and i.severity in ${sql(severities)}` : sql``,
    filter.source ? sql`and i.source = ${filter.source}` : sql``,
    filter.entityId ? sql`and i.entity_id = ${filter.entityId}` : sql``,
    filter.entityKind ? sql`and i.entity_kind = ${filter.entityKind}` : sql``,
    filter.acknowledged === "yes" ? sql`and i.acknowledged_at is not null` : filter.acknowledged === "no" ? sql`and i.acknowledged_at is null` : sql``,
    filter.ownerId === "none" ? sql`and i.owner_id is null` : filter.ownerId ? sql`and i.owner_id = ${filter.ownerId}::uuid` : sql``,
    // Plain text, not a pattern: the caller's % and _ match themselves.
    filter.q ? sql`and strpos(lower(i.title), lower(${filter.q})) > 0` : sql``,
    filter.recovered === "yes" ? sql`and ${recoveredAtSource(sql)}` : filter.recovered === "no" ? sql`and not ${recoveredAtSource(sql)}` : sql``,
    filter.correlationGroupId ? sql`and i.correlation_group_id = ${filter.correlationGroupId}::uuid` : sql``,
  ];
  return clauses.reduce((all, clause) => sql`${all} ${clause}`, sql`i.org_id = ${orgId}`);
}

/** The list's orders: opened newest first (the default), by severity, or by latest activity. */
const SORTS = ["newest", "severity", "activity"] as const;
type Sort = (typeof SORTS)[number];

/**
 * Cursors are opaque to callers: the position after which the next page starts, so a page never
 * repeats or skips an entry that was recorded meanwhile.
 */
export function encodeCursor(kind: "t" | "i" | "o", value: string): string {
  return Buffer.from(`${kind}:${value}`).toString("base64url");
}

/**
 * `t`: after a timeline entry's id; `i`: after an incident (newest first); `o`: an offset into a
 * list sorted by severity or activity, whose keys change as incidents do.
 */
export function decodeCursor(kind: "t" | "i" | "o", cursor: string): string {
  const text = Buffer.from(cursor, "base64url").toString();
  if (!text.startsWith(`${kind}:`)) throw new InvalidArgumentError("cursor is not one this list gave: start again without a cursor");
  const value = text.slice(2);
  if (kind === "i" ? !isUuid(value) : !/^\d{1,19}$/.test(value))
    throw new InvalidArgumentError("cursor is not one this list gave: start again without a cursor");
  return value;
}

/** Newest first, strictly after the cursor's incident (opened_at, id); nothing without one. */
export function afterIncident(sql: Sql, orgId: string, after: string | undefined) {
  return after ? sql`and (i.opened_at, i.id) < (select opened_at, id from incidents.incidents where id = ${after} and org_id = ${orgId})` : sql``;
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
): Promise<{ row: IncidentRow; timeline: TimelineEntryRow[]; timelineNextCursor?: string; nextEscalation?: EscalationDeadlineInit }> {
  if (!isUuid(id)) throw new NotFoundError("no such incident");
  const [row] = await sql<IncidentRow[]>`select ${incidentRead(sql)} from incidents.incidents i where i.id = ${id} and i.org_id = ${orgId}`;
  if (!row) throw new NotFoundError("no such incident");
  const page = await timelinePage(sql, id, undefined, TIMELINE_PAGE_SIZE);
  const next = row.state === "open" && !row.acknowledged_at ? await nextEscalation(sql, id) : undefined;
  return { row, timeline: page.entries, ...(page.nextCursor ? { timelineNextCursor: page.nextCursor } : {}), ...(next ? { nextEscalation: next } : {}) };
}

/** The incident as read: its first timeline page, and the cursor to the rest when there is more. */
export function incidentWithFirstPage(config: Config, orgSlug: string, loaded: Awaited<ReturnType<typeof loadIncident>>): IncidentInit {
  const incident = incidentShape(config, orgSlug, loaded.row, loaded.timeline);
  if (loaded.timelineNextCursor) incident.timelineNextCursor = loaded.timelineNextCursor;
  if (loaded.nextEscalation) incident.nextEscalation = loaded.nextEscalation;
  return incident;
}

/** The most related incidents an incident's page lists; the group's size counts them all. */
const MAX_RELATED = 100;

/** The other incidents of the incident's correlation group, oldest first. */
async function relatedIncidents(sql: Sql, row: IncidentRow): Promise<MessageInitShape<typeof RelatedIncidentSchema>[]> {
  if (!row.correlation_group_id) return [];
  const rows = await sql<Pick<IncidentRow, "id" | "title" | "severity" | "state" | "source" | "opened_at">[]>`
    select id, title, severity, state, source, opened_at from incidents.incidents
    where org_id = ${row.org_id} and correlation_group_id = ${row.correlation_group_id} and id <> ${row.id}
    order by opened_at, id limit ${MAX_RELATED}`;
  return rows.map((r) => ({ id: r.id, title: r.title, severity: r.severity, state: r.state, source: r.source, openedAt: timestampFromDate(r.opened_at) }));
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
      const limit = req.limit === 0 ? DEFAULT_LIMIT : req.limit;
      if (limit < 1 || limit > MAX_LIMIT) throw new InvalidArgumentError(`limit must be between 1 and ${MAX_LIMIT}`);
      const sort: Sort = req.sort === "" ? "newest" : isOneOf(SORTS, req.sort) ? req.sort : invalid(`sort must be one of ${SORTS.join(", ")}`);
      const where = incidentFilterWhere(sql, principal.orgId, req);

      if (sort === "newest") {
        // Newest first; a page continues strictly after the (opened_at, id) of the cursor's incident.
        const after = req.cursor ? decodeCursor("i", req.cursor) : undefined;
        const afterClause = afterIncident(sql, principal.orgId, after);
        const rows = await sql<IncidentRow[]>`
          select ${incidentRead(sql)} from incidents.incidents i where ${where} ${afterClause}
          order by i.opened_at desc, i.id desc limit ${limit + 1}`;
        const page = rows.slice(0, limit);
        return {
          incidents: page.map((row) => incidentShape(config, principal.orgSlug, row)),
          ...(rows.length > limit ? { nextCursor: encodeCursor("i", page.at(-1)!.id) } : {}),
        };
      }
      // Severity and activity change while a reader pages: the cursor is an offset into the order.
      const offset = req.cursor ? Number(decodeCursor("o", req.cursor)) : 0;
      // Equal severities: the incident repeated most first, then the one with the latest activity.
      const order =
        sort === "severity"
          ? sql`i.severity asc, repeat_count desc, last_activity_at desc nulls last, i.id desc`
          : sql`last_activity_at desc nulls last, i.id desc`;
      const rows = await sql<IncidentRow[]>`
        select * from (select ${incidentRead(sql)} from incidents.incidents i where ${where}) i
        order by ${order} limit ${limit + 1} offset ${offset}`;
      const page = rows.slice(0, limit);
      return {
        incidents: page.map((row) => incidentShape(config, principal.orgSlug, row)),
        ...(rows.length > limit ? { nextCursor: encodeCursor("o", String(offset + limit)) } : {}),
      };
    },

    async getIncident(req: GetIncidentRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const loaded = await loadIncident(sql, principal.orgId, req.id);
      const incident = incidentWithFirstPage(config, principal.orgSlug, loaded);
      incident.related = await relatedIncidents(sql, loaded.row);
      return incident;
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
