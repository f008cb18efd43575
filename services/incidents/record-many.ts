import { randomUUID } from "node:crypto";
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { type IncidentsService, type RecordRequest, RecordRequestSchema, type RecordResponseSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Config } from "../runtime/config/config.js";
import type { Sql } from "../runtime/data/database.js";
import type { Outbox } from "../runtime/data/outbox.js";
import { outboxRows } from "./domain-events.js";
import { incidentShape, storableJson, storableText, withSenderTime, type IncidentRow } from "./incident-shape.js";
import { afterRecording, type Delivery, recordedAnswer } from "./record.js";
import { toConnectError } from "../runtime/errors.js";
import type { Logger } from "../runtime/observability/logger.js";
import { runWithRequestId } from "../runtime/http/request-context.js";
import { currentTraceparent, inTraceOf, linkTraces } from "../runtime/observability/tracing.js";
import { checkRequest } from "../runtime/validation.js";
import { entryKindOfDelivery, OUTCOMES } from "../domain/vocabulary.js";

/**
 * RecordMany: many deliveries, each decided exactly as Record decides it, in a handful of
 * statements instead of one per delivery. The heartbeat sweep hands a thousand silences to this
 * core at once, and Record's group commit (`group-commit.ts`) hands it the deliveries that
 * arrived while a statement was in flight.
 *
 * 1. One read for the whole batch: for each delivery, an active maintenance window covering it and
 *    the open incident for its attach identity.
 * 2. Every plain new alert (no window, nothing open, first of its identity in the batch) opens in
 *    one statement for the batch: incidents, `opened` entries (which hold the event identifiers)
 *    and both events of each, with the same unique index deciding as in Record (`on conflict do
 *    nothing`).
 * 3. Every plain delivery for an identity with an open incident (no window, first of its identity
 *    in the batch) records on it in one statement: the incidents share-locked and re-checked open
 *    as in Record, entries (`on conflict do nothing` on the incident's event identifier: a retried
 *    event is recorded once), and events only where an entry was written.
 * 4. Everything else goes through Record itself, one by one: suppressions, a second delivery of an
 *    identity in the batch, an incident resolved or opened concurrently since the read, and
 *    anything Record's own checks should judge (unusual sizes, no identity or event identifier).
 *    Record is the single source of their rules.
 */

type RecordResponseInit = MessageInitShape<typeof RecordResponseSchema>;

const RECORD_METHOD = "warroom.incidents.v1.IncidentsService/Record";

/** A delivery the batch statements decide: Record's, with its identity and data ready for them. */
interface Plain extends Omit<Delivery, "attachIdentity" | "data" | "retryKey" | "entryRetryKey" | "correlationGroupId"> {
  index: number;
  identity: string;
  data: string | null;
  traceContext: string | null;
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const optionalText = (value: string | undefined) => (value === undefined ? null : storableText(value));

/**
 * The deliveries the batch statements can decide; undefined sends it through Record. Each delivery
 * has passed the schema's rules already (Record's at the call, RecordMany's per delivery), so only
 * what the schema cannot say is checked here.
 */
function plain(req: RecordRequest, index: number, traceContext: string | null): Plain | undefined {
  const a = req.alert;
  if (!a) return undefined;
  const title = storableText(a.title.trim());
  if (a.kind === "alert" && (!title || !a.severity)) return undefined;
  if (!a.attachIdentity || !a.eventId) return undefined;
  // Record keeps the retry key with the entry, so a retry after a commit its caller never heard of is recognized.
  if (req.retryKey) return undefined;
  // A sender's acknowledgement also acknowledges the incident: Record's statement does that.
  if (a.kind === "acknowledge") return undefined;
  // An incident it opens keeps its correlation group: Record's statement writes it.
  if (req.correlationGroupId) return undefined;
  const entity: Plain["entity"] = a.entity?.kind && a.entity.id ? { kind: storableText(a.entity.kind), id: storableText(a.entity.id) } : null;
  const occurredAt = a.occurredAt ? timestampDate(a.occurredAt) : null;
  if (occurredAt && !(occurredAt.getUTCFullYear() >= 1 && occurredAt.getUTCFullYear() <= 9999)) return undefined;
  return {
    index,
    orgId: req.orgId,
    orgSlug: req.orgSlug,
    source: a.source,
    kind: a.kind,
    identity: storableText(a.attachIdentity),
    eventId: storableText(a.eventId),
    title,
    severity: a.severity,
    entity,
    summary: optionalText(a.summary),
    link: optionalText(a.link),
    alertRef: optionalText(a.alertRef),
    runbookUrl: optionalText(a.runbookUrl),
    occurredAt,
    data: a.data && Object.keys(a.data).length > 0 ? JSON.stringify(storableJson(a.data)) : null,
    traceContext,
  };
}

/**
 * Decides what it can of `deliveries` in a handful of statements and puts each answer under the
 * delivery's index in `decided` as soon as its statement has committed (so a later statement's
 * failure never loses an answer already written). Deliveries left out of `decided` are for Record.
 */
export type RecordBatch = (deliveries: RecordRequest[], decided: Map<number, RecordResponseInit>, traceContexts?: (string | null)[]) => Promise<void>;

export function createRecordBatch(deps: { sql: Sql; config: Config; outbox: Outbox }): RecordBatch {
  const { sql, config, outbox } = deps;

  async function probe(batch: Plain[]): Promise<{ now: Date; covered: Set<number>; open: Map<number, string> }> {
    const rows = await sql<{ i: number; db_now: Date; window_id: string | null; open_id: string | null }[]>`
      select d.i, now() as db_now,
        (select w.id from incidents.maintenance_windows w
          where w.org_id = d.org_id and w.starts_at <= now() and now() < w.ends_at
            and (cardinality(w.sources) = 0 or d.source = any(w.sources))
            and (jsonb_array_length(w.entities) = 0 or w.entities @> d.entity::jsonb)
          limit 1) as window_id,
        -- By the key of incidents_open_key, which no other index holds (migration 7).
        (select i.id from incidents.incidents i
          where (i.org_id::text || i.open_identity) = (d.org_id::text || d.identity)) as open_id
      from unnest(${batch.map((p) => p.index)}::int[], ${batch.map((p) => p.orgId)}::uuid[], ${batch.map((p) => p.source)}::text[],
        ${batch.map((p) => p.identity)}::text[], ${batch.map((p) => (p.entity ? JSON.stringify([p.entity]) : null))}::text[])
        as d(i, org_id, source, identity, entity)`;
    const covered = new Set<number>();
    const open = new Map<number, string>();
    for (const r of rows) {
      if (r.window_id) covered.add(r.i);
      if (r.open_id) open.set(r.i, r.open_id);
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
          ${entryAt.map((d) => d.toISOString())}::timestamptz[], ${batch.map((p) => p.summary)}::text[], ${batch.map((p) => p.link)}::text[],
          ${batch.map((p) => p.alertRef)}::text[], ${batch.map((p) => p.runbookUrl)}::text[], ${batch.map((p) => p.data)}::text[],
          ${opened.map((o) => o.subject)}::text[], ${opened.map((o) => o.payload.toString("hex"))}::text[],
          ${recorded.map((o) => o.subject)}::text[], ${recorded.map((o) => o.payload.toString("hex"))}::text[],
          ${batch.map((p) => p.traceContext)}::text[])
          as d(i, id, org_id, title, severity, source, entity_kind, entity_id, identity, event_id, entry_at, summary, link, alert_ref,
               runbook_url, data, opened_subject, opened_payload, recorded_subject, recorded_payload, trace_context)
      ), opened as (
        insert into incidents.incidents (id, org_id, title, severity, source, entity_kind, entity_id, attach_identity, runbook_url, opened_at)
        select id, org_id, title, severity, source, entity_kind, entity_id, identity, runbook_url, ${now}::timestamptz from d
        on conflict (org_id, open_identity) do nothing
        returning *
      ), entry as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data)
        select o.id, 'opened', d.entry_at, d.summary, d.link, d.alert_ref, d.event_id, d.data::jsonb from opened o join d on d.id = o.id
      ), events as (
        insert into incidents.outbox (subject, payload, trace_context)
        select e.subject, decode(e.payload, 'hex'), d.trace_context from opened o join d on d.id = o.id
          cross join lateral (values (1, d.opened_subject, d.opened_payload), (2, d.recorded_subject, d.recorded_payload)) as e (n, subject, payload)
        order by d.i, e.n
      )
      select d.i, o.* from opened o join d on d.id = o.id`;
    return new Map(rows.map(({ i, ...row }) => [i, row as IncidentRow]));
  }

  /**
   * Records each delivery on its open incident, in one statement (no two with one event identifier
   * for one incident); returns, by delivery index, the incident and whether an entry was written
   * (not: the event identifier was already held). A delivery whose incident is no longer open is
   * left out.
   */
  async function attachAll(batch: { p: Plain; incidentId: string }[], now: Date): Promise<Map<number, IncidentRow & { entry_at: Date | null }>> {
    // Stamped when the batch was decided (the database clock); the sender's own time goes in the data.
    const entryAt = batch.map(() => now);
    const entryData = batch.map(({ p }) =>
      p.occurredAt ? JSON.stringify(withSenderTime(p.data ? (JSON.parse(p.data) as JsonObject) : null, p.occurredAt)) : p.data,
    );
    const recorded = batch.map(({ p, incidentId }, k) =>
      outboxRows.timelineRecorded({ orgId: p.orgId, incidentId, kind: entryKindOfDelivery(p.kind), at: entryAt[k]! }),
    );
    const rows = await sql<(IncidentRow & { i: number; entry_at: Date | null })[]>`
      with d as (
        select * from unnest(
          ${batch.map(({ p }) => p.index)}::int[], ${batch.map(({ incidentId }) => incidentId)}::uuid[], ${batch.map(({ p }) => p.eventId)}::text[],
          ${batch.map(({ p }) => entryKindOfDelivery(p.kind))}::text[], ${entryAt.map((d) => d.toISOString())}::timestamptz[],
          ${batch.map(({ p }) => p.summary)}::text[], ${batch.map(({ p }) => p.link)}::text[], ${batch.map(({ p }) => p.alertRef)}::text[],
          ${entryData}::text[], ${recorded.map((o) => o.subject)}::text[], ${recorded.map((o) => o.payload.toString("hex"))}::text[],
          ${batch.map(({ p }) => p.traceContext)}::text[])
          as d(i, incident_id, event_id, kind, at, summary, link, alert_ref, data, subject, payload, trace_context)
      ), locked as (
        -- Share-locked in one order, so two batches never wait on each other in a cycle. Found by
        -- primary key alone (the ids are the statement's parameter): a condition on state could be
        -- planned on another index and read every open incident. Whether each is still open is
        -- checked on the version the lock returns.
        select i.* from incidents.incidents i
        where i.id = any(${[...new Set(batch.map(({ incidentId }) => incidentId))]}::uuid[])
        order by i.id
        for share
      ), target as (
        select * from locked where state = 'open'
      ), entry as (
        -- In one order in every batch, so two batches never wait on each other's identifiers in a cycle.
        insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data)
        select d.incident_id, d.kind, d.at, d.summary, d.link, d.alert_ref, d.event_id, d.data::jsonb
        from d join target t on t.id = d.incident_id
        order by d.incident_id, d.event_id
        on conflict (incident_id, event_id) where event_id is not null do nothing
        returning incident_id, event_id
      ), events as (
        insert into incidents.outbox (subject, payload, trace_context)
        select d.subject, decode(d.payload, 'hex'), d.trace_context from d join entry e on e.incident_id = d.incident_id and e.event_id = d.event_id
        order by d.i
      )
      select d.i, t.*,
        case when exists (select 1 from entry e where e.incident_id = d.incident_id and e.event_id = d.event_id) then d.at end as entry_at
      from d join target t on t.id = d.incident_id`;
    return new Map(rows.map(({ i, ...row }) => [i, row]));
  }

  return async (deliveries, decided, traceContexts) => {
    const candidates = deliveries
      .map((d, i) => plain(d, i, traceContexts?.[i] ?? null))
      .filter((p): p is Plain => p !== undefined)
      // One order of identities in every batch: concurrent batches take their locks in one order.
      .sort((a, b) => compare(a.orgId, b.orgId) || compare(a.identity, b.identity) || a.index - b.index);
    if (candidates.length === 0) return;
    const { now, covered, open } = await probe(candidates);

    const openers = new Map<string, Plain>();
    const toAttach: { p: Plain; incidentId: string }[] = [];
    /** Deliveries of an identity the batch opens, recorded on it once it has. */
    const afterOpening: Plain[] = [];
    /** A second delivery of one event identifier, answered as its first is. */
    const echoes: { p: Plain; first: Plain }[] = [];
    const firstOfEvent = new Map<string, Plain>();
    for (const p of candidates) {
      if (covered.has(p.index)) continue;
      const identity = `${p.orgId}\u0000${p.identity}`;
      const incidentId = open.get(p.index);
      const opener = openers.get(identity);
      if (!incidentId && !opener) {
        if (p.kind === "alert") openers.set(identity, p);
        continue;
      }
      const event = `${identity}\u0000${p.eventId}`;
      const first = firstOfEvent.get(event) ?? (opener?.eventId === p.eventId ? opener : undefined);
      if (first) {
        echoes.push({ p, first });
        continue;
      }
      firstOfEvent.set(event, p);
      if (incidentId) toAttach.push({ p, incidentId });
      else afterOpening.push(p);
    }

    /** The incident each decided delivery opened or recorded on, for its echoes. */
    const incidentOfDelivery = new Map<number, IncidentRow>();
    const attach = async (batch: { p: Plain; incidentId: string }[]) => {
      if (batch.length === 0) return;
      const attached = await attachAll(batch, now);
      for (const { p } of batch) {
        const row = attached.get(p.index);
        if (!row) continue;
        decided.set(p.index, recordedAnswer(config, p.orgSlug, afterRecording(p, row)));
        incidentOfDelivery.set(p.index, row);
      }
    };
    const opening = async () => {
      if (openers.size === 0) return;
      const opened = await openAll([...openers.values()], now);
      const incidentOf = new Map<string, string>();
      for (const [identity, p] of openers) {
        const row = opened.get(p.index);
        if (!row) continue;
        decided.set(p.index, { outcome: OUTCOMES.opened, incident: incidentShape(config, p.orgSlug, row) });
        incidentOfDelivery.set(p.index, row);
        incidentOf.set(identity, row.id);
      }
      // A concurrent writer opened what an opener could not: its identity's others go through Record.
      await attach(
        afterOpening.flatMap((p) => {
          const incidentId = incidentOf.get(`${p.orgId}\u0000${p.identity}`);
          return incidentId ? [{ p, incidentId }] : [];
        }),
      );
    };
    try {
      const settled = await Promise.allSettled([opening(), attach(toAttach)]);
      for (const s of settled) if (s.status === "rejected") throw s.reason;
    } finally {
      if (decided.size > 0) outbox.poke();
      for (const { p, first } of echoes) {
        const incident = incidentOfDelivery.get(first.index);
        if (incident) decided.set(p.index, recordedAnswer(config, p.orgSlug, afterRecording(p, { ...incident, entry_at: null })));
      }
    }
  };
}

/**
 * RecordMany: decides a batch of deliveries as Record would, the plain ones in the batch path's
 * statements and the rest through `record`: the deliveries of one identity in request order (a
 * second delivery attaches to what the first opened), different identities at the same time.
 * Each delivery is decided in its own trace and under its own request id when it names them (a
 * caller batching the deliveries of many callers, intake over NATS); the call's span links to them.
 */
export function createRecordManyHandlers(deps: {
  sql: Sql;
  config: Config;
  outbox: Outbox;
  logger: Logger;
  /** Record itself, for every delivery the batch statements do not decide. */
  record: ServiceImpl<typeof IncidentsService>["record"];
}): Pick<ServiceImpl<typeof IncidentsService>, "recordMany"> {
  const { record, logger } = deps;
  const batch = createRecordBatch(deps);
  return {
    async recordMany(req, context: HandlerContext) {
      const results: RecordResponseInit[] = new Array(req.deliveries.length);
      const errors: Record<number, string> = {};
      // The schema checks the batch as a whole (its size); each delivery is checked here, on its own,
      // so one refused delivery never holds back the others.
      const checked = req.deliveries.flatMap((delivery, i) => {
        try {
          checkRequest(RecordRequestSchema, delivery);
          return [i];
        } catch (err) {
          errors[i] = err instanceof Error ? err.message : String(err);
          results[i] = {};
          return [];
        }
      });
      const callTrace = currentTraceparent();
      linkTraces(new Set(checked.map((i) => req.deliveries[i]!.traceparent)));
      const decided = new Map<number, RecordResponseInit>();
      await batch(
        checked.map((i) => req.deliveries[i]!),
        decided,
        checked.map((i) => req.deliveries[i]!.traceparent || callTrace),
      );
      // The rest: one chain per identity, each in request order.
      const chains = new Map<string, number[]>();
      for (const [k, i] of checked.entries()) {
        const answer = decided.get(k);
        if (answer) {
          results[i] = answer;
          continue;
        }
        const { orgId, alert } = req.deliveries[i]!;
        const identity = alert?.attachIdentity ? `${orgId}/${alert.attachIdentity}` : `#${i}`;
        const chain = chains.get(identity);
        if (chain) chain.push(i);
        else chains.set(identity, [i]);
      }
      const decide = async (i: number) => {
        const delivery = req.deliveries[i]!;
        const inItsContext = () => inTraceOf(delivery.traceparent, () => record(delivery, context));
        try {
          results[i] = (await (delivery.requestId ? runWithRequestId(delivery.requestId, inItsContext) : inItsContext())) as RecordResponseInit;
        } catch (err) {
          // As Record's own call would have answered it ("[code] message"), logged the same way.
          errors[i] = toConnectError(err, logger, RECORD_METHOD).message;
          results[i] = {};
        }
      };
      await Promise.all(
        [...chains.values()].map(async (chain) => {
          for (const i of chain) await decide(i);
        }),
      );
      return { results, errors };
    },
  };
}
