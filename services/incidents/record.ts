import { randomUUID } from "node:crypto";
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { Alert, IncidentsService, RecordRequest, RecordResponseSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Config } from "../runtime/config.js";
import type { Sql } from "../runtime/database.js";
import { InvalidArgumentError, UnavailableError } from "../runtime/errors.js";
import type { Outbox } from "../runtime/outbox.js";
import { throwIfCallerGaveUp } from "../runtime/request-context.js";
import { outboxRows } from "./domain-events.js";
import { incidentShape, isUuid, storableJson, storableText, type IncidentRow } from "./incident-shape.js";
import { ALERT_KINDS, AUDIT_KINDS, ENTRY_KIND_OF_DELIVERY, isOneOf, OUTCOMES, SEVERITIES, SOURCE_BADGES, type AlertKind } from "./vocabulary.js";

/**
 * Record: one normalized delivery becomes opened, attached, recorded, ignored or suppressed.
 *
 * Exactly once comes from the database, never from this process: the partial unique index on
 * open incidents' attach identity decides which of many concurrent deliveries opens, and the
 * primary key of held_event_ids decides which records an event identifier. Everything a decision
 * writes (incident, held identifier, timeline entry, outbox events) commits atomically.
 *
 * Round trips, because every delivery pays them:
 * 1. One read (the probe): an active maintenance window, the open incident for the identity and
 *    whether it holds the event identifier. Suppressed, redelivered and ignored deliveries end
 *    here without a transaction (a suppression writes one audit row).
 * 2. One statement that writes: open a new incident, or record on the open one, with its held
 *    identifier, timeline entry and outbox rows in data-modifying CTEs (one statement is one
 *    transaction). Times come from the probe's now(), the database clock, so the events can be
 *    encoded before the statement runs.
 * 3. Only when a concurrent writer changed the answer between the two (another delivery opened
 *    the incident first, or a person resolved it): read again and write again, each statement
 *    seeing what has committed since, until it decides.
 *
 * No multi-statement transaction is needed anywhere: every write is one atomic statement whose
 * outcome the unique indexes decide.
 */

type RecordResponseInit = MessageInitShape<typeof RecordResponseSchema>;

interface RecordDeps {
  sql: Sql;
  config: Config;
  outbox: Outbox;
}

// Generous bounds: the intake already cuts what senders send; these only stop a caller's bug
// from storing megabytes or from overflowing a unique index entry.
const LIMITS = {
  identifierBytes: 1024,
  titleCharacters: 2048,
  summaryCharacters: 65536,
  referenceCharacters: 8192,
  entityPartCharacters: 1024,
};

/** A delivery checked and ready to store. */
interface Delivery {
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
}

interface ProbeRow extends Partial<IncidentRow> {
  db_now: Date;
  window_id: string | null;
  held: boolean;
}

type Written = IncidentRow & { entry_at: Date | null };

/** What the writes concluded; the response is built from it. */
type Decision =
  | { outcome: "opened" | "attached" | "recorded"; incident: IncidentRow; reason?: string }
  | { outcome: "ignored"; reason: string };

const REASONS = {
  noIdentity: "the delivery carries no attach identity, so it cannot belong to an open incident",
  noOpenIncident: "no open incident for this attach identity",
  eventHeld: "this event identifier is already recorded on the open incident",
  suppressed: "an active maintenance window covers this delivery",
};

export function createRecordHandlers(deps: RecordDeps): Pick<ServiceImpl<typeof IncidentsService>, "record"> {
  const { sql, config, outbox } = deps;

  async function probe(d: Delivery): Promise<ProbeRow> {
    const entityMatch = d.entity ? sql.json([{ kind: d.entity.kind, id: d.entity.id }]) : null;
    const [row] = await sql<ProbeRow[]>`
      select now() as db_now,
        (select w.id from incidents.maintenance_windows w
          where w.org_id = ${d.orgId} and w.starts_at <= now() and now() < w.ends_at
            and (cardinality(w.sources) = 0 or ${d.source}::text = any(w.sources))
            and (jsonb_array_length(w.entities) = 0 or w.entities @> ${entityMatch}::jsonb)
          order by w.starts_at, w.id limit 1) as window_id,
        i.*,
        (i.id is not null and ${d.eventId}::text <> '' and exists (
          select 1 from incidents.held_event_ids h where h.incident_id = i.id and h.event_id = ${d.eventId}::text)) as held
      from (select 1) as one
      left join incidents.incidents i
        on i.org_id = ${d.orgId} and i.attach_identity = ${d.attachIdentity}::text and i.state = 'open'`;
    return row!;
  }

  /**
   * Fast path for a delivery that should open: one statement inserts the incident, its held
   * identifier, its `opened` entry and both events, or nothing at all when an incident for the
   * identity is already open (then undefined: a concurrent delivery won, attach to it).
   */
  async function openInOneStatement(d: Delivery, now: Date): Promise<Written | undefined> {
    // Nothing is written for a caller that has given up (its deadline passed, or it canceled).
    throwIfCallerGaveUp();
    const id = randomUUID();
    const entryAt = d.occurredAt ?? now;
    const opened = outboxRows.opened({ orgId: d.orgId, incidentId: id, title: d.title, severity: d.severity, source: d.source, at: now });
    const recorded = outboxRows.timelineRecorded({ orgId: d.orgId, incidentId: id, kind: "opened", at: entryAt });
    const [row] = await sql<Written[]>`
      with opened as (
        insert into incidents.incidents (id, org_id, title, severity, source, entity_kind, entity_id, attach_identity, runbook_url, opened_at)
        values (${id}, ${d.orgId}, ${d.title}, ${d.severity}, ${d.source}, ${d.entity?.kind ?? null}, ${d.entity?.id ?? null},
                ${d.attachIdentity}, ${d.runbookUrl}, ${now})
        on conflict (org_id, attach_identity) where state = 'open' do nothing
        returning *
      ), held as (
        insert into incidents.held_event_ids (incident_id, event_id)
        select id, ${d.eventId}::text from opened where ${d.eventId}::text <> ''
      ), entry as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data)
        select id, 'opened', ${entryAt}::timestamptz, ${d.summary}::text, ${d.link}::text,
               ${d.alertRef}::text, nullif(${d.eventId}::text, ''), ${d.data ? sql.json(d.data as never) : null}::jsonb
        from opened
        returning at
      ), events as (
        insert into incidents.outbox (subject, payload)
        select subject, payload from (values (${opened.subject}::text, ${opened.payload}::bytea), (${recorded.subject}::text, ${recorded.payload}::bytea)) as e (subject, payload)
        where exists (select 1 from opened)
      )
      select o.*, (select at from entry) as entry_at from opened o`;
    return row;
  }

  /**
   * Fast path for a delivery on the incident the probe saw open: one statement records it
   * unless the identifier is held (entry_at null), or finds the incident no longer open
   * (undefined). The share lock orders it against a person resolving the incident.
   */
  async function recordInOneStatement(d: Delivery, incidentId: string, now: Date): Promise<Written | undefined> {
    // Nothing is written for a caller that has given up (its deadline passed, or it canceled).
    throwIfCallerGaveUp();
    const kind = ENTRY_KIND_OF_DELIVERY[d.kind];
    const entryAt = d.occurredAt ?? now;
    const recorded = outboxRows.timelineRecorded({ orgId: d.orgId, incidentId, kind, at: entryAt });
    const [row] = await sql<Written[]>`
      with target as (
        select * from incidents.incidents where id = ${incidentId} and state = 'open' for share
      ), held as (
        insert into incidents.held_event_ids (incident_id, event_id)
        select id, ${d.eventId}::text from target where ${d.eventId}::text <> ''
        on conflict do nothing
        returning incident_id
      ), entry as (
        insert into incidents.timeline_entries (incident_id, kind, at, summary, link, alert_ref, event_id, data)
        select id, ${kind}::text, ${entryAt}::timestamptz, ${d.summary}::text, ${d.link}::text,
               ${d.alertRef}::text, nullif(${d.eventId}::text, ''), ${d.data ? sql.json(d.data as never) : null}::jsonb
        from target
        where ${d.eventId}::text = '' or exists (select 1 from held)
        returning at
      ), events as (
        insert into incidents.outbox (subject, payload)
        select ${recorded.subject}::text, ${recorded.payload}::bytea where exists (select 1 from entry)
      )
      select t.*, (select at from entry) as entry_at from target t`;
    return row;
  }

  /** The open incident for the identity as committed now, and the database clock. */
  async function lookAgain(d: Delivery): Promise<{ id: string | undefined; now: Date }> {
    const [row] = await sql<{ id: string | null; now: Date }[]>`
      select now() as now, (select id from incidents.incidents
        where org_id = ${d.orgId} and attach_identity = ${d.attachIdentity}::text and state = 'open') as id`;
    return { id: row!.id ?? undefined, now: row!.now };
  }

  /**
   * After a concurrent writer changed what the probe saw (another delivery opened the incident
   * first, or a person resolved it): each statement sees what has committed since, so each turn
   * either decides or learns that the answer changed again and looks once more.
   */
  async function decideAgain(d: Delivery): Promise<Decision> {
    for (let turn = 0; turn < 8; turn++) {
      const { id, now } = await lookAgain(d);
      if (id === undefined) {
        if (d.kind !== "alert") return { outcome: OUTCOMES.ignored, reason: REASONS.noOpenIncident };
        const opened = await openInOneStatement(d, now);
        if (opened) return { outcome: OUTCOMES.opened, incident: opened };
        continue;
      }
      const written = await recordInOneStatement(d, id, now);
      if (written) return afterRecording(d, written);
    }
    throw new UnavailableError("the incident changed under this delivery too many times; retry it");
  }

  function afterRecording(d: Delivery, written: Written): Decision {
    if (written.entry_at) return { outcome: d.kind === "alert" ? OUTCOMES.attached : OUTCOMES.recorded, incident: written };
    return d.kind === "alert"
      ? { outcome: OUTCOMES.attached, incident: written, reason: REASONS.eventHeld }
      : { outcome: OUTCOMES.ignored, reason: REASONS.eventHeld };
  }

  function respond(d: Delivery, decision: Decision): RecordResponseInit {
    if (decision.outcome === "ignored") return { outcome: decision.outcome, reason: decision.reason };
    const response: RecordResponseInit = { outcome: decision.outcome, incident: incidentShape(config, d.orgSlug, decision.incident) };
    if (decision.reason) response.reason = decision.reason;
    return response;
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
    await sql`insert into incidents.outbox (subject, payload) values (${audit.subject}, ${audit.payload})`;
    outbox.poke();
    return { outcome: OUTCOMES.suppressed, maintenanceWindowId: windowId, reason: REASONS.suppressed };
  }

  return {
    async record(req: RecordRequest) {
      const d = checkDelivery(req);
      const seen = await probe(d);
      if (seen.window_id) return suppress(d, seen.window_id, seen.db_now);

      if (d.attachIdentity === null && d.kind !== "alert") {
        return { outcome: OUTCOMES.ignored, reason: REASONS.noIdentity };
      }
      const openId = seen.id ?? undefined;
      if (openId !== undefined && seen.held) {
        // A redelivery: nothing to write.
        if (d.kind === "alert") {
          return { outcome: OUTCOMES.attached, incident: incidentShape(config, d.orgSlug, seen as unknown as IncidentRow), reason: REASONS.eventHeld };
        }
        return { outcome: OUTCOMES.ignored, reason: REASONS.eventHeld };
      }
      if (openId === undefined && d.kind !== "alert") return { outcome: OUTCOMES.ignored, reason: REASONS.noOpenIncident };

      let decision: Decision | undefined;
      if (openId === undefined) {
        const opened = await openInOneStatement(d, seen.db_now);
        if (opened) decision = { outcome: OUTCOMES.opened, incident: opened };
      } else {
        const written = await recordInOneStatement(d, openId, seen.db_now);
        if (written) decision = afterRecording(d, written);
      }
      // A concurrent writer changed the answer since the probe: settle it in a transaction.
      decision ??= await decideAgain(d);
      if (decision.outcome !== "ignored") outbox.poke();
      return respond(d, decision);
    },
  };
}

function checkDelivery(req: RecordRequest): Delivery {
  if (!isUuid(req.orgId)) throw new InvalidArgumentError("orgId must be an organization id");
  if (!req.orgSlug) throw new InvalidArgumentError("orgSlug is required");
  const alert: Alert | undefined = req.alert;
  if (!alert) throw new InvalidArgumentError("alert is required");
  if (!isOneOf(SOURCE_BADGES, alert.source)) throw new InvalidArgumentError(`alert.source must be one of ${SOURCE_BADGES.join(", ")}`);
  if (!isOneOf(ALERT_KINDS, alert.kind)) throw new InvalidArgumentError(`alert.kind must be one of ${ALERT_KINDS.join(", ")}`);
  const title = storableText(alert.title.trim());
  if (alert.kind === "alert") {
    // Only an alert can open an incident, so only an alert must say what to open.
    if (!title) throw new InvalidArgumentError("alert.title is required for an alert");
    if (!isOneOf(SEVERITIES, alert.severity)) throw new InvalidArgumentError(`alert.severity must be one of ${SEVERITIES.join(", ")}`);
  }
  bounded("alert.attachIdentity", Buffer.byteLength(alert.attachIdentity), LIMITS.identifierBytes);
  bounded("alert.eventId", Buffer.byteLength(alert.eventId), LIMITS.identifierBytes);
  bounded("alert.title", title.length, LIMITS.titleCharacters);
  bounded("alert.summary", alert.summary?.length ?? 0, LIMITS.summaryCharacters);
  bounded("alert.link", alert.link?.length ?? 0, LIMITS.referenceCharacters);
  bounded("alert.alertRef", alert.alertRef?.length ?? 0, LIMITS.referenceCharacters);
  bounded("alert.runbookUrl", alert.runbookUrl?.length ?? 0, LIMITS.referenceCharacters);
  let entity: Delivery["entity"] = null;
  if (alert.entity && alert.entity.kind && alert.entity.id) {
    bounded("alert.entity.kind", alert.entity.kind.length, LIMITS.entityPartCharacters);
    bounded("alert.entity.id", alert.entity.id.length, LIMITS.entityPartCharacters);
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
  };
}

function bounded(field: string, length: number, max: number): void {
  if (length > max) throw new InvalidArgumentError(`${field} is longer than ${max}`);
}
