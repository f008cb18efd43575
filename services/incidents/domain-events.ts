import { create, toBinary, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { AuditRecordedSchema, IncidentOpenedSchema, IncidentResolvedSchema, TimelineRecordedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { SUBJECTS } from "./vocabulary.js";

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

export const outboxRows = {
  opened: (e: { orgId: string; incidentId: string; title: string; severity: string; source: string; at: Date }): OutboxRow => ({
    subject: SUBJECTS.incidentOpened,
    payload: Buffer.from(toBinary(IncidentOpenedSchema, create(IncidentOpenedSchema, { ...e, at: timestampFromDate(e.at) }))),
  }),
  timelineRecorded: (e: { orgId: string; incidentId: string; kind: string; at: Date }): OutboxRow => ({
    subject: SUBJECTS.timelineRecorded,
    payload: Buffer.from(toBinary(TimelineRecordedSchema, create(TimelineRecordedSchema, { ...e, at: timestampFromDate(e.at) }))),
  }),
  resolved: (e: { orgId: string; incidentId: string; state: string; actor: string; at: Date }): OutboxRow => ({
    subject: SUBJECTS.incidentResolved,
    payload: Buffer.from(toBinary(IncidentResolvedSchema, create(IncidentResolvedSchema, { ...e, at: timestampFromDate(e.at) }))),
  }),
  /** An audit record, stored by the identity service (which owns the audit log). */
  audit: (e: { orgId: string; kind: string; actor: string; at: Date; data: JsonObject }): OutboxRow => ({
    subject: SUBJECTS.auditRecorded,
    payload: Buffer.from(toBinary(AuditRecordedSchema, create(AuditRecordedSchema, { ...e, at: timestampFromDate(e.at) }))),
  }),
};
