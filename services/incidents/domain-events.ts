import { create, toBinary, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { EVENTS, type EventType } from "../runtime/transport/events.js";

/**
 * The incident core's domain events, as outbox rows built before the statement that makes the
 * change: each write of this service is one SQL statement whose CTEs make the change and insert
 * these rows (the same `subject, payload` Outbox.write inserts) only if the change happened. One
 * statement is one transaction, so the event commits with its change, and no write of this
 * service needs a multi-statement transaction. Times are the database clock, read by an earlier
 * statement of the same call, so that the payloads can be encoded here; Record, which has no
 * earlier statement, encodes the time (and, on attach, the incident) in SQL instead (see
 * `record.ts`).
 */
export interface OutboxRow {
  subject: string;
  payload: Buffer;
}

function row<Desc extends DescMessage>(type: EventType<Desc>, init: MessageInitShape<Desc>): OutboxRow {
  return { subject: type.subject, payload: Buffer.from(toBinary(type.schema, create(type.schema, init))) };
}

export const outboxRows = {
  opened: (e: { orgId: string; incidentId: string; title: string; severity: string; source: string; at: Date }): OutboxRow =>
    row(EVENTS.incidentOpened, { ...e, at: timestampFromDate(e.at) }),
  timelineRecorded: (e: { orgId: string; incidentId: string; kind: string; at: Date }): OutboxRow =>
    row(EVENTS.timelineRecorded, { ...e, at: timestampFromDate(e.at) }),
  resolved: (e: { orgId: string; incidentId: string; state: string; actor: string; at: Date }): OutboxRow =>
    row(EVENTS.incidentResolved, { ...e, at: timestampFromDate(e.at) }),
  severityChanged: (e: { orgId: string; incidentId: string; from: string; to: string; actor: string; at: Date }): OutboxRow =>
    row(EVENTS.severityChanged, { ...e, at: timestampFromDate(e.at) }),
  unacknowledged: (e: {
    orgId: string;
    incidentId: string;
    title: string;
    severity: string;
    source: string;
    step: number;
    steps: number;
    minutes: number;
    deadline: Date;
    at: Date;
  }): OutboxRow => row(EVENTS.incidentUnacknowledged, { ...e, deadline: timestampFromDate(e.deadline), at: timestampFromDate(e.at) }),
  /** An audit record, stored by the identity service (which owns the audit log). */
  audit: (e: { orgId: string; kind: string; actor: string; at: Date; data: JsonObject }): OutboxRow =>
    row(EVENTS.auditRecorded, { ...e, at: timestampFromDate(e.at) }),
};
