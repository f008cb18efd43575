import { randomUUID } from "node:crypto";
import { create, toBinary, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Alert, RecordRequest, RecordResponseSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Config } from "../runtime/config/config.js";
import type { Sql } from "../runtime/data/database.js";
import { InvalidArgumentError, UnavailableError } from "../runtime/errors.js";
import type { Outbox } from "../runtime/data/outbox.js";
import { throwIfCallerGaveUp } from "../runtime/http/request-context.js";
import { outboxRows } from "./domain-events.js";
import { EVENTS } from "../runtime/transport/events.js";
import { incidentShape, storableJson, storableText, withSenderTime, type IncidentRow } from "./incident-shape.js";
import { AUDIT_KINDS, entryKindOfDelivery, OUTCOMES, SEVERITIES, type AlertKind } from "../domain/vocabulary.js";
import { currentTraceparent } from "../runtime/observability/tracing.js";

/**
 * Record: one normalized delivery becomes opened, attached, recorded, ignored or suppressed.
 *
 * Exactly once comes from the database, never from this process: the unique index on open
 * incidents' attach identity (`open_identity`, null once an incident is not open) decides which of many concurrent deliveries opens, and the
 * unique index on timeline entries' (incident, event identifier) decides which records an event
 * identifier. Everything a decision writes (incident, timeline entry, outbox events) commits
 * atomically.
 *
 * One statement per delivery, because every delivery pays it: its CTEs look for an active
 * maintenance window and the open incident for the identity (share-locked, which orders it
 * against a person resolving the incident), record on that incident (unless it already holds the
 * event identifier) or else open a new one (`on conflict do nothing` on that unique
 * index), and insert the outbox events of whatever they wrote. One statement is one transaction.
 * The events' times are the database clock and, on attach, their incident is the one the
 * statement found, so those two fields are encoded in SQL (migration 3) and appended to the rest
 * of the message, encoded here.
 *
 * Only two cases take more: a suppressed delivery writes its audit row in a second statement,
 * and when a concurrent delivery opened the incident between this statement's snapshot and its
 * insert (the insert found the conflict and did nothing), the statement runs again, seeing what
 * has committed since, until it decides.
 */

type RecordResponseInit = MessageInitShape<typeof RecordResponseSchema>;

interface RecordDeps {
  sql: Sql;
  config: Config;
  /** Only to wake the relay after a commit: the events are written by the statement itself. */
  outbox: Pick<Outbox, "poke">;
}

/** A delivery checked and ready to store. */
export interface Delivery {
  orgId: string;
  orgSlug: string;
  source: string;
  kind: AlertKind;
  attachIdentity: string | null;
  eventId: string;
  title: string;
  severity: string;
  entity: { kind: string; id: string } | null;
  summary: string | null;
  link: string | null;
  alertRef: string | null;
  occurredAt: Date | null;
  runbookUrl: string | null;
  data: JsonObject | null;
  /** The correlation group intake placed the delivery in, kept on an incident it opens; null: none. */
  correlationGroupId: string | null;
  /** The caller's retry key (intake's), kept with an incident this delivery opens; null: none. */
  retryKey: string | null;
  /**
   * The caller's retry key kept with the entry this delivery writes (any kind): a retry of a
   * delivery that committed after its caller gave up finds its entry and gets its outcome.
   */
  entryRetryKey: string | null;
}

/** What the statement did: the incident it opened or found open (absent: neither), and whether it wrote an entry. */
type Written = Partial<IncidentRow> & {
  db_now: Date;
  window_id: string | null;
  is_new: boolean | null;
  entry_at: Date | null;
  /** The kind of the entry an earlier copy of this delivery (same retry key) wrote on the incident. */
  retried_kind: string | null;
};

/** What the writes concluded; the response is built from it. */
type Decision = { outcome: "opened" | "attached" | "recorded"; incident: IncidentRow; reason?: string } | { outcome: "ignored"; reason: string };

/** The decision on a delivery to an open incident, from whether an entry was written (no: its event identifier was held). */
export function afterRecording(d: { kind: AlertKind }, written: IncidentRow & { entry_at: Date | null }): Decision {
  if (written.entry_at) return { outcome: d.kind === "alert" ? OUTCOMES.attached : OUTCOMES.recorded, incident: written };
  return d.kind === "alert"
    ? { outcome: OUTCOMES.attached, incident: written, reason: REASONS.eventHeld }
    : { outcome: OUTCOMES.ignored, reason: REASONS.eventHeld };
}

export function recordedAnswer(config: Config, orgSlug: string, decision: Decision): RecordResponseInit {
  if (decision.outcome === "ignored") return { outcome: decision.outcome, reason: decision.reason };
  const response: RecordResponseInit = { outcome: decision.outcome, incident: incidentShape(config, orgSlug, decision.incident) };
  if (decision.reason) response.reason = decision.reason;
  return response;
}

/** The event identifier a recovery without one is held under: this prefix and its alert entry's id. */
const RECOVERY_AFTER_ENTRY = "recovery-after-entry:";

const REASONS = {
  recoveryHeld: "a recovery is already recorded since the incident's latest alert",
  noIdentity: "the delivery carries no attach identity, so it cannot belong to an open incident",
  noOpenIncident: "no open incident for this attach identity",
  eventHeld: "this event identifier is already recorded on the open incident",
  suppressed: "an active maintenance window covers this delivery",
};

/**
 * Record: decides one normalized delivery (open, attach, record, ignore or suppress) in one
 * statement, exactly once per event id.
 */
export function createRecordHandlers(deps: RecordDeps): { record(req: RecordRequest): Promise<RecordResponseInit> } {
  const { sql, config, outbox } = deps;

  /**
   * The delivery in one statement (see the top of this file). Returns the window that suppresses
   * it, or the incident opened or found open with whether an entry was written, or neither: no
   * open incident (or, for an alert, a concurrent delivery opened it first: decide again).
   */
  /**
   * A sender's acknowledgement (PagerDuty's `acknowledge`, Opsgenie's) acknowledges the incident
   * as a responder's does, by the source's badge, when its entry is written and nobody has yet;
   * in the statement that writes the entry, so neither is ever written without the other.
   */
  function acknowledgedBySender(d: Delivery) {
    return sql`, acknowledged as (
        update incidents.incidents i set acknowledged_at = e.at, acknowledged_by = ${d.source}::text
        from entry e where i.id = e.incident_id and i.acknowledged_at is null
      )`;
  }

  async function writeInOneStatement(d: Delivery, events: EventPrefixes): Promise<Written> {
    const entityMatch = d.entity ? sql.json([{ kind: d.entity.kind, id: d.entity.id }]) : null;
    // Nothing is written for a caller that has given up (its deadline passed, or it canceled).
    throwIfCallerGaveUp();
    const kind = entryKindOfDelivery(d.kind);
    const data = d.data ? sql.json(d.data) : null;
    // A later entry is stamped when it arrived; the sender's own time goes in its data.
    const entryData = d.occurredAt ? sql.json(withSenderTime(d.data, d.occurredAt)) : data;
    const traceContext = currentTraceparent();
    const [row] = await sql<Written[]>`
      with win as (
        select w.id from incidents.maintenance_windows w
        where w.org_id = ${d.orgId} and w.starts_at <= now() and now() < w.ends_at
          and (cardinality(w.sources) = 0 or ${d.source}::text = any(w.sources))
          and (jsonb_array_length(w.entities) = 0 or w.entities @> ${entityMatch}::jsonb)
        order by w.starts_at, w.id limit 1
      ), target as (
        -- By the key of incidents_open_key, which no other index holds (migration 7).
        select i.* from incidents.incidents i
        where (i.org_id::text || i.open_identity) = (${d.orgId}::uuid::text || ${d.attachIdentity}::text)
          and not exists (select 1 from win)
        for share
      ), retried as (
        -- A retry of a delivery that opened this incident (its retry key, kept by the opening
        -- statement): answered with that incident, nothing written.
        select i.* from incidents.incidents i
        where ${d.retryKey}::text is not null and i.org_id = ${d.orgId}::uuid and i.retry_key = ${d.retryKey}::text and i.state = 'open'
          and not exists (select 1 from win)
      ), already as (
        -- An entry an earlier copy of this delivery wrote (its retry key): answered as that copy
        -- was, nothing written.
        select e.kind from incidents.timeline_entries e join target t on e.incident_id = t.id
        where ${d.entryRetryKey}::text is not null and e.retry_key = ${d.entryRetryKey}::text
        limit 1
      ), entry as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data, retry_key)
        -- A recovery that names no event (a PagerDuty resolve, an Opsgenie close) is held as the
        -- recovery of the incident's latest alert entry: a second one with no alert between them
        -- meets the unique index and is not recorded, even when both arrive at once.
        select id, ${kind}::text, now(), ${d.summary}::text, ${d.link}::text,
               ${d.alertRef}::text,
               coalesce(nullif(${d.eventId}::text, ''), case when ${kind}::text = 'recovery' then ${RECOVERY_AFTER_ENTRY}::text || (
                 select max(e.id) from incidents.timeline_entries e where e.incident_id = target.id and e.kind in ('opened', 'repeat'))::text end),
               ${entryData}::jsonb, ${d.entryRetryKey}::text
        from target
        where not exists (select 1 from already)
        -- Either unique index may conflict: the event identifier's, or the retry key's (a
        -- concurrent copy of this delivery wrote it first).
        on conflict do nothing
        returning incident_id, at
      )${d.kind === "acknowledge" ? acknowledgedBySender(d) : sql``}, opened as (
        insert into incidents.incidents (id, org_id, title, severity, source, entity_kind, entity_id, attach_identity, runbook_url, opened_at, retry_key, correlation_group_id)
        select ${events.newIncidentId}::uuid, ${d.orgId}::uuid, ${d.title}::text, ${d.severity}::text, ${d.source}::text,
               ${d.entity?.kind ?? null}::text, ${d.entity?.id ?? null}::text, ${d.attachIdentity}::text, ${d.runbookUrl}::text, now(),
               ${d.retryKey}::text, ${d.correlationGroupId}::uuid
        where ${d.kind === "alert"}::boolean and not exists (select 1 from win) and not exists (select 1 from target)
          and not exists (select 1 from retried)
        -- Either unique index may conflict: the open identity's, or the retry key's (a concurrent
        -- retry opened it first). Then the statement runs again and finds what it opened.
        on conflict do nothing
        returning *
      ), opened_entry as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data, retry_key)
        select id, 'opened', coalesce(${d.occurredAt}::timestamptz, now()), ${d.summary}::text, ${d.link}::text,
               ${d.alertRef}::text, nullif(${d.eventId}::text, ''), ${data}::jsonb, ${d.entryRetryKey}::text
        from opened
        returning incident_id, at
      ), events as (
        insert into incidents.outbox (subject, payload, trace_context)
        select ${EVENTS.incidentOpened.subject}::text, ${events.opened}::bytea || incidents.pb_timestamp_field(${OPENED_AT_FIELD}, o.opened_at), ${traceContext}::text
        from opened o
        union all
        select ${EVENTS.timelineRecorded.subject}::text, ${events.openedEntry}::bytea
               || incidents.pb_string_field(${RECORDED_INCIDENT_FIELD}, e.incident_id::text) || incidents.pb_timestamp_field(${RECORDED_AT_FIELD}, e.at),
               ${traceContext}::text
        from opened_entry e
        union all
        select ${EVENTS.timelineRecorded.subject}::text, ${events.entry}::bytea
               || incidents.pb_string_field(${RECORDED_INCIDENT_FIELD}, e.incident_id::text) || incidents.pb_timestamp_field(${RECORDED_AT_FIELD}, e.at),
               ${traceContext}::text
        from entry e
      )
      select now() as db_now, (select id from win) as window_id, (select kind from already) as retried_kind, x.*
      from (select 1) as one left join (
        select true as is_new, o.*, (select at from opened_entry) as entry_at from opened o
        union all
        select false as is_new, t.*, (select at from entry) as entry_at from target t
        union all
        select true as is_new, r.*, null::timestamptz as entry_at from retried r
      ) as x on true`;
    return row!;
  }

  /**
   * What the statement concluded, or undefined when a concurrent delivery opened the incident
   * between its snapshot and its insert (an alert that neither opened nor found an open incident).
   */
  function decide(d: Delivery, written: Written, rechecked: boolean): Decision | { outcome: "suppressed"; windowId: string; at: Date } | undefined {
    if (written.window_id) return { outcome: OUTCOMES.suppressed, windowId: written.window_id, at: written.db_now };
    if (d.attachIdentity === null && d.kind !== "alert") return { outcome: OUTCOMES.ignored, reason: REASONS.noIdentity };
    if (written.id == null) return d.kind === "alert" ? undefined : { outcome: OUTCOMES.ignored, reason: REASONS.noOpenIncident };
    const incident = written as Written & IncidentRow;
    if (written.is_new) return { outcome: OUTCOMES.opened, incident };
    // A copy of this delivery wrote its entry before: its outcome, so the retry's answer is the first one's.
    if (written.retried_kind === "opened") return { outcome: OUTCOMES.opened, incident };
    if (written.retried_kind) return { outcome: d.kind === "alert" ? OUTCOMES.attached : OUTCOMES.recorded, incident };
    // Nothing written, and maybe because a concurrent copy with the retry key committed its entry
    // meanwhile (the index's conflict, unseen by this statement's snapshot): look once more.
    if (!written.entry_at && d.entryRetryKey && !rechecked) return undefined;
    // A resolved alert is resolved once: the same recovery again, with no alert between, records nothing.
    if (!written.entry_at && d.kind === "recovery" && !d.eventId) return { outcome: OUTCOMES.ignored, reason: REASONS.recoveryHeld };
    return afterRecording(d, incident);
  }

  async function suppress(d: Delivery, windowId: string, at: Date): Promise<RecordResponseInit> {
    // Nothing is written for a caller that has given up (its deadline passed, or it canceled).
    throwIfCallerGaveUp();
    // Nothing opens, but an operator can still see what the window swallowed: the audit log.
    const data: JsonObject = {
      maintenanceWindowId: windowId,
      source: d.source,
      kind: d.kind,
      title: d.title,
      attachIdentity: d.attachIdentity ?? "",
      eventId: d.eventId,
      entity: d.entity ? { kind: d.entity.kind, id: d.entity.id } : null,
    };
    const audit = outboxRows.audit({ orgId: d.orgId, kind: AUDIT_KINDS.triggerSuppressed, actor: `trigger:${d.source}`, at, data });
    await sql`insert into incidents.outbox (subject, payload, trace_context) values (${audit.subject}, ${audit.payload}, ${currentTraceparent()}::text)`;
    outbox.poke();
    return { outcome: OUTCOMES.suppressed, maintenanceWindowId: windowId, reason: REASONS.suppressed };
  }

  return {
    async record(req: RecordRequest) {
      const d = toDelivery(req);
      const events = eventPrefixes(d);
      let rechecked = false;
      for (let turn = 0; turn < 8; turn++) {
        const written = await writeInOneStatement(d, events);
        const decision = decide(d, written, rechecked);
        if (!decision) {
          rechecked ||= written.id != null;
          continue;
        }
        if (decision.outcome === "suppressed") return suppress(d, decision.windowId, decision.at);
        // Events were written with the entry (an opened incident always has its entry).
        if (written.entry_at) outbox.poke();
        return recordedAnswer(config, d.orgSlug, decision);
      }
      throw new UnavailableError("the incident changed under this delivery too many times; retry it");
    },
  };
}

/** The outbox events' messages without the fields only the statement knows (time; incident on attach). */
interface EventPrefixes {
  newIncidentId: string;
  opened: Buffer | null;
  openedEntry: Buffer | null;
  entry: Buffer;
}

const OPENED_AT_FIELD = EVENTS.incidentOpened.schema.field.at.number;
const RECORDED_INCIDENT_FIELD = EVENTS.timelineRecorded.schema.field.incidentId.number;
const RECORDED_AT_FIELD = EVENTS.timelineRecorded.schema.field.at.number;

function eventPrefixes(d: Delivery): EventPrefixes {
  const newIncidentId = randomUUID();
  const recorded = (kind: string) => Buffer.from(toBinary(EVENTS.timelineRecorded.schema, create(EVENTS.timelineRecorded.schema, { orgId: d.orgId, kind })));
  if (d.kind !== "alert") return { newIncidentId, opened: null, openedEntry: null, entry: recorded(entryKindOfDelivery(d.kind)) };
  return {
    newIncidentId,
    opened: Buffer.from(
      toBinary(
        EVENTS.incidentOpened.schema,
        create(EVENTS.incidentOpened.schema, { orgId: d.orgId, incidentId: newIncidentId, title: d.title, severity: d.severity, source: d.source }),
      ),
    ),
    openedEntry: recorded("opened"),
    entry: recorded(entryKindOfDelivery(d.kind)),
  };
}

/**
 * The request as the statement stores it. The schema's rules (vocabulary, bounds, ids) were
 * checked before the handler ran; what remains depends on the kind of delivery.
 */
function toDelivery(req: RecordRequest): Delivery {
  const alert: Alert = req.alert!;
  const title = storableText(alert.title.trim());
  if (alert.kind === "alert") {
    // Only an alert can open an incident, so only an alert must say what to open.
    if (!title) throw new InvalidArgumentError("alert.title is required for an alert");
    if (!alert.severity) throw new InvalidArgumentError(`alert.severity must be one of ${SEVERITIES.join(", ")}`);
  }
  let entity: Delivery["entity"] = null;
  if (alert.entity?.kind && alert.entity.id) {
    entity = { kind: storableText(alert.entity.kind), id: storableText(alert.entity.id) };
  }
  const occurredAt = alert.occurredAt ? timestampDate(alert.occurredAt) : null;
  if (occurredAt && !(occurredAt.getUTCFullYear() >= 1 && occurredAt.getUTCFullYear() <= 9999)) {
    throw new InvalidArgumentError("alert.occurredAt must be a time between the years 1 and 9999");
  }
  const optionalText = (value: string | undefined) => (value === undefined ? null : storableText(value));
  return {
    orgId: req.orgId,
    orgSlug: req.orgSlug,
    source: alert.source,
    kind: alert.kind,
    attachIdentity: alert.attachIdentity ? storableText(alert.attachIdentity) : null,
    eventId: storableText(alert.eventId),
    title,
    severity: alert.severity,
    entity,
    summary: optionalText(alert.summary),
    link: optionalText(alert.link),
    alertRef: optionalText(alert.alertRef),
    occurredAt,
    runbookUrl: optionalText(alert.runbookUrl),
    data: alert.data && Object.keys(alert.data).length > 0 ? storableJson(alert.data) : null,
    correlationGroupId: req.correlationGroupId || null,
    // Only an alert without an attach identity opens by it: any other finds its incident by the identity.
    retryKey: req.retryKey && alert.kind === "alert" && !alert.attachIdentity ? storableText(req.retryKey) : null,
    entryRetryKey: req.retryKey ? storableText(req.retryKey) : null,
  };
}
