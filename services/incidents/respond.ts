import type { JsonObject } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { PendingQuery, Row } from "postgres";
import type { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import type { Clients } from "../runtime/transport/clients.js";
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { currentTraceparent } from "../runtime/observability/tracing.js";
import type { IncidentsDeps } from "./deps.js";
import { type OutboxRow, outboxRows } from "./domain-events.js";
import { storableText, timelineEntryShape } from "./incident-shape.js";
import { incidentWithFirstPage, loadIncident } from "./list-and-get.js";
import { type ClockRow, commaSeparated, type IncidentIdRow, type IncidentStateRow, type TimelineEntryRow } from "./store.js";
import { AUDIT_KINDS } from "../domain/vocabulary.js";

/** A note is a timeline entry's summary, held to the same limit as every other summary. */
export const MAX_NOTE_CHARACTERS = 65536;

/** The most turns a compare-and-set retries before it asks the caller to. */
const TURNS = 4;

/** The outbox rows as the VALUES list of an insert, written only if the change happened. */
function outboxInsert(sql: IncidentsDeps["sql"], rows: OutboxRow[]) {
  const list = commaSeparated(
    sql,
    rows.map((r) => sql`(${r.subject}::text, ${r.payload}::bytea)`),
  );
  return sql`
    insert into incidents.outbox (subject, payload, trace_context)
    select subject, payload, ${currentTraceparent()}::text from (values ${list}) as e (subject, payload)`;
}

/** The member of the organization with this id, read with the caller's own credential. */
async function findMember(clients: Clients, context: HandlerContext, org: string, id: string): Promise<{ id: string; email: string } | undefined> {
  const headers = {
    authorization: context.requestHeader.get("authorization") ?? "",
    "x-request-id": context.requestHeader.get("x-request-id") ?? "",
  };
  let cursor = "";
  for (;;) {
    const page = await clients.identity.listMembers({ org, cursor }, { headers, signal: context.signal });
    const member = page.members.find((m) => m.id === id);
    if (member) return { id: member.id, email: member.email };
    if (!page.nextCursor) return undefined;
    cursor = page.nextCursor;
  }
}

/** Who acts, in which organization: what an action needs of the caller once authorized. */
export interface Actor {
  orgId: string;
  email: string;
}

/** What a single action did: recorded its change, or found the incident already so. */
export type ActionOutcome = "done" | "unchanged";

/**
 * Acknowledge and owner as actions on one incident, shared by the single-incident RPCs and the
 * bulk action so both record the same entry, audit record and events. Each throws NotFound for an
 * incident not of the organization and FailedPrecondition when its state refuses the action.
 */
export function createResponderActions(deps: Pick<IncidentsDeps, "sql" | "outbox">) {
  const { sql, outbox } = deps;

  /**
   * Runs `update` (an update of one incident answering its id) and, only if it changed the
   * incident, writes the timeline entry and the events in the same statement; answers whether it did.
   */
  async function changeRecorded(
    update: PendingQuery<Row[]>,
    entry: { kind: string; at: Date; summary: string; data: JsonObject },
    rows: OutboxRow[],
  ): Promise<boolean> {
    const changed = await sql<IncidentIdRow[]>`
      with changed as (${update}), entry as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, data)
        select id, ${entry.kind}::text, ${entry.at}::timestamptz, ${entry.summary}::text, ${sql.json(entry.data)}::jsonb from changed
      ), events as (
        ${outboxInsert(sql, rows)} where exists (select 1 from changed)
      )
      select id from changed`;
    if (changed.length === 0) return false;
    outbox.poke();
    return true;
  }

  return {
    async acknowledge(actor: Actor, id: string): Promise<ActionOutcome> {
      if (!isUuid(id)) throw new NotFoundError("no such incident");
      for (let turn = 0; turn < TURNS; turn++) {
        const [current] = await sql<(IncidentStateRow & ClockRow & { acknowledged_at: Date | null })[]>`
          select state, acknowledged_at, now() as now from incidents.incidents where id = ${id} and org_id = ${actor.orgId}`;
        if (!current) throw new NotFoundError("no such incident");
        // The first acknowledgement counts; a second one (a retried click, a colleague) records nothing.
        if (current.acknowledged_at) return "unchanged";
        if (current.state !== "open") {
          throw new FailedPreconditionError(`the incident is ${current.state}; only an open incident is acknowledged`);
        }
        const at = current.now;
        const rows = [
          outboxRows.timelineRecorded({ orgId: actor.orgId, incidentId: id, kind: "acknowledged", at }),
          outboxRows.audit({ orgId: actor.orgId, kind: AUDIT_KINDS.incidentAcknowledged, actor: actor.email, at, data: { incidentId: id } }),
        ];
        const update = sql`
          update incidents.incidents set acknowledged_at = ${at}::timestamptz, acknowledged_by = ${actor.email}::text
          where id = ${id} and org_id = ${actor.orgId} and state = 'open' and acknowledged_at is null
          returning id`;
        const entry = { kind: "acknowledged", at, summary: `Acknowledged by ${actor.email}`, data: { actor: actor.email } };
        if (await changeRecorded(update, entry, rows)) return "done";
      }
      throw new UnavailableError("the incident kept changing; retry");
    },

    /** Sets the owner (a member already found in the organization), or clears it with null. */
    async setOwner(actor: Actor, id: string, owner: { id: string; email: string } | null): Promise<ActionOutcome> {
      if (!isUuid(id)) throw new NotFoundError("no such incident");
      for (let turn = 0; turn < TURNS; turn++) {
        const [current] = await sql<(IncidentStateRow & ClockRow & { owner_id: string | null; owner_email: string | null })[]>`
          select state, owner_id, owner_email, now() as now from incidents.incidents where id = ${id} and org_id = ${actor.orgId}`;
        if (!current) throw new NotFoundError("no such incident");
        if (current.owner_id === (owner?.id ?? null)) return "unchanged";
        if (current.state === "archived") throw new FailedPreconditionError("the incident is archived; its owner no longer changes");
        const at = current.now;
        const data = { from: current.owner_email, to: owner?.email ?? null, fromId: current.owner_id, toId: owner?.id ?? null, actor: actor.email };
        const rows = [
          outboxRows.timelineRecorded({ orgId: actor.orgId, incidentId: id, kind: "owner_changed", at }),
          outboxRows.audit({
            orgId: actor.orgId,
            kind: AUDIT_KINDS.ownerChanged,
            actor: actor.email,
            at,
            data: { incidentId: id, from: data.fromId, to: data.toId },
          }),
        ];
        const summary = owner ? `Owner ${owner.email}, set by ${actor.email}` : `Owner ${current.owner_email ?? ""} removed by ${actor.email}`;
        const update = sql`
          update incidents.incidents set owner_id = ${owner?.id ?? null}::uuid, owner_email = ${owner?.email ?? null}::text
          where id = ${id} and org_id = ${actor.orgId} and owner_id is not distinct from ${current.owner_id}::uuid
            and state = ${current.state}::text
          returning id`;
        if (await changeRecorded(update, { kind: "owner_changed", at, summary, data }, rows)) return "done";
      }
      throw new UnavailableError("the incident kept changing; retry");
    },
  };
}

/**
 * The owner an `ownerId` names: a member of the organization, or null for "" (clear). Refuses an
 * id that names no member, saying where to find one.
 */
export async function ownerNamed(clients: Clients, context: HandlerContext, org: string, ownerId: string): Promise<{ id: string; email: string } | null> {
  if (ownerId === "") return null;
  const found = isUuid(ownerId) ? await findMember(clients, context, org, ownerId) : undefined;
  if (!found) throw new InvalidArgumentError(`ownerId ${ownerId} is not a member of ${org}: take an id from GET /o/${org}/members`);
  return found;
}

/**
 * What a responder does on an incident: acknowledge it, give it an owner, write a note. Each is
 * one statement that makes the change, writes its timeline entry and its domain events (and its
 * audit record), as every write of this service is. Acknowledgement and owner are attributes of
 * the incident, never states: the spec's attach rules read only the state, and Record never
 * writes these columns, so a later repeat leaves them as they are.
 */
export function createRespondHandlers(
  deps: Pick<IncidentsDeps, "sql" | "config" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IncidentsService>, "acknowledgeIncident" | "setIncidentOwner" | "addIncidentNote"> {
  const { sql, config, clients, outbox } = deps;
  const actions = createResponderActions(deps);
  return {
    async acknowledgeIncident(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      await actions.acknowledge({ orgId: principal.orgId, email: principal.email }, req.id);
      return incidentWithFirstPage(config, principal.orgSlug, await loadIncident(sql, principal.orgId, req.id));
    },

    async setIncidentOwner(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (!isUuid(req.id)) throw new NotFoundError("no such incident");
      const owner = await ownerNamed(clients, context, req.org, req.ownerId);
      await actions.setOwner({ orgId: principal.orgId, email: principal.email }, req.id, owner);
      return incidentWithFirstPage(config, principal.orgSlug, await loadIncident(sql, principal.orgId, req.id));
    },

    async addIncidentNote(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const text = req.text.trim();
      if (text === "") throw new InvalidArgumentError("text is empty: write the note's text");
      if (text.length > MAX_NOTE_CHARACTERS) {
        throw new InvalidArgumentError(`text is ${text.length} characters, longer than ${MAX_NOTE_CHARACTERS}: shorten the note or split it in two`);
      }
      if (!isUuid(req.id)) throw new NotFoundError("no such incident");
      const [clock] = await sql<ClockRow[]>`select now() as now`;
      const at = clock!.now;
      const actor = principal.email;
      const rows = [outboxRows.timelineRecorded({ orgId: principal.orgId, incidentId: req.id, kind: "note", at })];
      // A note may follow a resolve or an archive: the timeline is the incident's record.
      const [entry] = await sql<TimelineEntryRow[]>`
        with incident as (
          select id from incidents.incidents where id = ${req.id} and org_id = ${principal.orgId}
        ), entry as (
          insert into incidents.timeline_entries (incident_id, kind, at, summary, data)
          select id, 'note', ${at}::timestamptz, ${storableText(text)}::text, ${sql.json({ actor })}::jsonb from incident
          returning kind, at, summary, link, alert_ref, event_id, data
        ), events as (
          ${outboxInsert(sql, rows)} where exists (select 1 from entry)
        )
        select * from entry`;
      if (!entry) throw new NotFoundError("no such incident");
      outbox.poke();
      return timelineEntryShape(entry);
    },
  };
}
