import { randomUUID } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { type IncidentsService, type RecordRequest, RecordRequestSchema, type RecordResponseSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Config } from "../runtime/config.js";
import type { Sql } from "../runtime/database.js";
import type { Outbox } from "../runtime/outbox.js";
import { outboxRows } from "./domain-events.js";
import { incidentShape, storableJson, storableText, type IncidentRow } from "./incident-shape.js";
import { OUTCOMES } from "./vocabulary.js";
import { checkRequest } from "../runtime/validation.js";

/**
 * RecordMany: many deliveries, each decided exactly as Record decides it, in a handful of
 * statements instead of two or three per delivery. It exists for the heartbeat sweep, which hands
 * a thousand silences to this core at once.
 *
 * 1. One read for the whole batch: for each delivery, an active maintenance window covering it and
 *    the open incident for its attach identity.
 * 2. Every plain new alert (no window, nothing open, first of its identity in the batch) opens in
 *    one statement for the batch: incidents, held identifiers, `opened` entries and both events of
 *    each, with the same unique index deciding as in Record (`on conflict do nothing`).
 * 3. Everything else goes through Record itself, one by one: suppressions, attaches to an open
 *    incident, a second delivery of an identity in the batch, one a concurrent writer opened
 *    first, and anything Record's own checks should judge (unusual sizes, no identity, other
 *    kinds). Those are rare in a sweep, and Record is the single source of their rules.
 */

type RecordResponseInit = MessageInitShape<typeof RecordResponseSchema>;

interface Plain {
  index: number;
  orgId: string;
  orgSlug: string;
  source: string;
  identity: string;
  eventId: string;
  title: string;
  severity: string;
  entity: { kind: string; id: string } | null;
  summary: string | null;
  occurredAt: Date | null;
  data: string | null;
}

/**
 * The deliveries the batch statement can open; undefined sends it through Record. Each delivery has
 * passed the schema's rules already (see recordMany).
 */
function plain(req: RecordRequest, index: number): Plain | undefined {
  const a = req.alert;
  if (a?.kind !== "alert" || !a.severity) return undefined;
  const title = storableText(a.title.trim());
  if (!title || !a.attachIdentity || !a.eventId) return undefined;
  // Links, references and runbooks are not part of the fast path.
  if (a.link !== undefined || a.alertRef !== undefined || a.runbookUrl !== undefined) return undefined;
  const entity = a.entity?.kind && a.entity.id ? { kind: storableText(a.entity.kind), id: storableText(a.entity.id) } : null;
  const occurredAt = a.occurredAt ? timestampDate(a.occurredAt) : null;
  if (occurredAt && !(occurredAt.getUTCFullYear() >= 1 && occurredAt.getUTCFullYear() <= 9999)) return undefined;
  return {
    index,
    orgId: req.orgId,
    orgSlug: req.orgSlug,
    source: a.source,
    identity: storableText(a.attachIdentity),
    eventId: storableText(a.eventId),
    title,
    severity: a.severity,
    entity,
    summary: a.summary === undefined ? null : storableText(a.summary),
    occurredAt,
    data: a.data && Object.keys(a.data).length > 0 ? JSON.stringify(storableJson(a.data)) : null,
  };
}

/**
 * RecordMany: decides a batch of deliveries as Record would, opening the plain new incidents in one
 * statement and passing the rest to `record`.
 */
export function createRecordManyHandlers(deps: {
  sql: Sql;
  config: Config;
  outbox: Outbox;
  /** Record itself, for every delivery the batch statement does not decide. */
  record: ServiceImpl<typeof IncidentsService>["record"];
}): Pick<ServiceImpl<typeof IncidentsService>, "recordMany"> {
  const { sql, config, outbox, record } = deps;

  async function probe(batch: Plain[]): Promise<{ now: Date; covered: Set<number>; open: Set<number> }> {
    const rows = await sql<{ i: number; db_now: Date; window_id: string | null; open_id: string | null }[]>`
      select d.i, now() as db_now,
        (select w.id from incidents.maintenance_windows w
          where w.org_id = d.org_id and w.starts_at <= now() and now() < w.ends_at
            and (cardinality(w.sources) = 0 or d.source = any(w.sources))
            and (jsonb_array_length(w.entities) = 0 or w.entities @> d.entity::jsonb)
          limit 1) as window_id,
        (select i.id from incidents.incidents i
          where i.org_id = d.org_id and i.attach_identity = d.identity and i.state = 'open') as open_id
      from unnest(${batch.map((p) => p.index)}::int[], ${batch.map((p) => p.orgId)}::uuid[], ${batch.map((p) => p.source)}::text[],
        ${batch.map((p) => p.identity)}::text[], ${batch.map((p) => (p.entity ? JSON.stringify([p.entity]) : null))}::text[])
        as d(i, org_id, source, identity, entity)`;
    const covered = new Set<number>();
    const open = new Set<number>();
    for (const r of rows) {
      if (r.window_id) covered.add(r.i);
      if (r.open_id) open.add(r.i);
    }
    return { now: rows[0]?.db_now ?? new Date(), covered, open };
  }

  /** Opens one incident per delivery in one statement; returns the opened rows by delivery index. */
  async function openAll(batch: Plain[], now: Date): Promise<Map<number, IncidentRow>> {
    const ids = batch.map(() => randomUUID());
    const entryAt = batch.map((p) => p.occurredAt ?? now);
    const opened = batch.map((p, k) =>
      outboxRows.opened({ orgId: p.orgId, incidentId: ids[k]!, title: p.title, severity: p.severity, source: p.source, at: now }),
    );
    const recorded = batch.map((p, k) => outboxRows.timelineRecorded({ orgId: p.orgId, incidentId: ids[k]!, kind: "opened", at: entryAt[k]! }));
    const rows = await sql<(IncidentRow & { i: number })[]>`
      with d as (
        select * from unnest(
          ${batch.map((p) => p.index)}::int[], ${ids}::uuid[], ${batch.map((p) => p.orgId)}::uuid[], ${batch.map((p) => p.title)}::text[],
          ${batch.map((p) => p.severity)}::text[], ${batch.map((p) => p.source)}::text[], ${batch.map((p) => p.entity?.kind ?? null)}::text[],
          ${batch.map((p) => p.entity?.id ?? null)}::text[], ${batch.map((p) => p.identity)}::text[], ${batch.map((p) => p.eventId)}::text[],
          ${entryAt.map((d) => d.toISOString())}::timestamptz[], ${batch.map((p) => p.summary)}::text[], ${batch.map((p) => p.data)}::text[],
          ${opened.map((o) => o.subject)}::text[], ${opened.map((o) => o.payload.toString("hex"))}::text[],
          ${recorded.map((o) => o.subject)}::text[], ${recorded.map((o) => o.payload.toString("hex"))}::text[])
          as d(i, id, org_id, title, severity, source, entity_kind, entity_id, identity, event_id, entry_at, summary, data,
               opened_subject, opened_payload, recorded_subject, recorded_payload)
      ), opened as (
        insert into incidents.incidents (id, org_id, title, severity, source, entity_kind, entity_id, attach_identity, runbook_url, opened_at)
        select id, org_id, title, severity, source, entity_kind, entity_id, identity, null, ${now}::timestamptz from d
        on conflict (org_id, attach_identity) where state = 'open' do nothing
        returning *
      ), held as (
        insert into incidents.held_event_ids (incident_id, event_id)
        select o.id, d.event_id from opened o join d on d.id = o.id
      ), entry as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data)
        select o.id, 'opened', d.entry_at, d.summary, null, null, d.event_id, d.data::jsonb from opened o join d on d.id = o.id
      ), events as (
        insert into incidents.outbox (subject, payload)
        select e.subject, decode(e.payload, 'hex') from opened o join d on d.id = o.id
          cross join lateral (values (1, d.opened_subject, d.opened_payload), (2, d.recorded_subject, d.recorded_payload)) as e (n, subject, payload)
        order by d.i, e.n
      )
      select d.i, o.* from opened o join d on d.id = o.id`;
    return new Map(rows.map(({ i, ...row }) => [i, row as IncidentRow]));
  }

  return {
    async recordMany(req, context: HandlerContext) {
      const results: RecordResponseInit[] = new Array(req.deliveries.length);
      const errors: Record<number, string> = {};
      // The schema checks the batch as a whole (its size); each delivery is checked here, on its own.
      const viaRecord = new Set<number>();
      req.deliveries.forEach((delivery, i) => {
        try {
          checkRequest(RecordRequestSchema, delivery);
          viaRecord.add(i);
        } catch (err) {
          errors[i] = err instanceof Error ? err.message : String(err);
          results[i] = {};
        }
      });
      const candidates = [...viaRecord].map((i) => plain(req.deliveries[i]!, i)).filter((p): p is Plain => p !== undefined);
      if (candidates.length > 0) {
        const { now, covered, open } = await probe(candidates);
        const seen = new Set<string>();
        const batch = candidates.filter((p) => {
          const key = `${p.orgId}\u0000${p.identity}`;
          if (covered.has(p.index) || open.has(p.index) || seen.has(key)) return false;
          seen.add(key);
          return true;
        });
        if (batch.length > 0) {
          const opened = await openAll(batch, now);
          for (const p of batch) {
            const row = opened.get(p.index);
            if (!row) continue;
            results[p.index] = { outcome: OUTCOMES.opened, incident: incidentShape(config, p.orgSlug, row) };
            viaRecord.delete(p.index);
          }
          if (opened.size > 0) outbox.poke();
        }
      }
      // The rest, in request order (a second delivery of an identity attaches to what the first opened).
      for (const i of viaRecord) {
        try {
          results[i] = (await record(req.deliveries[i]!, context)) as RecordResponseInit;
        } catch (err) {
          // One refused delivery never holds back the others.
          errors[i] = err instanceof Error ? err.message : String(err);
          results[i] = {};
        }
      }
      return { results, errors };
    },
  };
}
