import { create, fromBinary, type DescMessage, type JsonObject, type MessageShape } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import {
  AuditRecordedSchema,
  CredentialChangedSchema,
  EvidenceRecordedSchema,
  HeartbeatSilentSchema,
  IncidentOpenedSchema,
  IncidentResolvedSchema,
  IncidentUnacknowledgedSchema,
  InvestigationCompletedSchema,
  SeverityChangedSchema,
  TimelineRecordedSchema,
  UpdateSentSchema,
} from "../../../gen/warroom/events/v1/events_pb.js";
import type { TransactionSql } from "../data/database.js";
import type { DomainEvent, EventBus, SubscribeOptions } from "./event-bus.js";
import type { Outbox } from "../data/outbox.js";
import { eventType, type EventType } from "./event-type.js";

export type { EventType };

/**
 * The event catalog: every domain event the services exchange, each subject paired with its
 * schema here and nowhere else. Outbox writes, subscribers and the console's live stream take an
 * entry of this table, never a subject string and a schema side by side.
 */
export const EVENTS = {
  incidentOpened: eventType("incident.opened", IncidentOpenedSchema),
  timelineRecorded: eventType("incident.timeline_recorded", TimelineRecordedSchema),
  incidentResolved: eventType("incident.resolved", IncidentResolvedSchema),
  severityChanged: eventType("incident.severity_changed", SeverityChangedSchema),
  incidentUnacknowledged: eventType("incident.unacknowledged", IncidentUnacknowledgedSchema),
  heartbeatSilent: eventType("heartbeat.silent", HeartbeatSilentSchema),
  updateSent: eventType("update.sent", UpdateSentSchema),
  credentialChanged: eventType("credential.changed", CredentialChangedSchema),
  auditRecorded: eventType("audit.recorded", AuditRecordedSchema),
  investigationCompleted: eventType("incident.investigation_completed", InvestigationCompletedSchema),
  evidenceRecorded: eventType("incident.evidence_recorded", EvidenceRecordedSchema),
} as const;

const BY_SUBJECT = new Map<string, EventType>(Object.values(EVENTS).map((type) => [type.subject, type]));

/** The catalog entry of a subject, or undefined for a subject the catalog does not hold. */
export function eventTypeOf(subject: string): EventType | undefined {
  return BY_SUBJECT.get(subject);
}

/**
 * Subscribes a handler to one kind of event, decoded with its schema. A payload that does not
 * decode throws, so a durable subscriber retries it and, after its limit, dead-letters it.
 */
export function onEvent<Desc extends DescMessage>(
  bus: EventBus,
  type: EventType<Desc>,
  handler: (message: MessageShape<Desc>, event: DomainEvent) => Promise<void>,
  options?: SubscribeOptions,
): Promise<void> {
  return bus.subscribe(type.subject, (event) => handler(fromBinary(type.schema, event.payload), event), options);
}

/** An audit record: who did what in which organization. Never put a secret in `data`. */
export interface AuditRecord {
  orgId: string;
  kind: string;
  actor: string;
  data: JsonObject;
}

/**
 * Writes an audit record in the caller's transaction, timed now; the identity service, which owns
 * the audit log, stores it once.
 */
export async function recordAudit(outbox: Outbox, tx: TransactionSql, record: AuditRecord): Promise<void> {
  await outbox.write(tx, EVENTS.auditRecorded, create(AuditRecordedSchema, { ...record, at: timestampNow() }));
}
