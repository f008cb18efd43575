import { create, toBinary, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { AuditRecordedSchema, IncidentOpenedSchema, IncidentResolvedSchema, TimelineRecordedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import type { TransactionSql } from "../runtime/database.js";
import type { Outbox } from "../runtime/outbox.js";
import { SUBJECTS } from "./vocabulary.js";

/** The incident core's domain events, each written to the outbox in the transaction of its change. */
export interface IncidentEvents {
  opened(tx: TransactionSql, e: { orgId: string; incidentId: string; title: string; severity: string; source: string; at: Date }): Promise<void>;
  timelineRecorded(tx: TransactionSql, e: { orgId: string; incidentId: string; kind: string; at: Date }): Promise<void>;
  resolved(tx: TransactionSql, e: { orgId: string; incidentId: string; state: string; actor: string; at: Date }): Promise<void>;
  /** An audit record, stored by the identity service (which owns the audit log). */
  audit(tx: TransactionSql, e: { orgId: string; kind: string; actor: string; at: Date; data: JsonObject }): Promise<void>;
}

/**
 * An outbox row built ahead of the statement that inserts it: the same (subject, payload) that
 * Outbox.write inserts, for the single-statement writes of Record's fast paths, where the row is
 * inserted by the statement's own CTE only if the change it describes happened.
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
  audit: (e: { orgId: string; kind: string; actor: string; at: Date; data: JsonObject }): OutboxRow => ({
    subject: SUBJECTS.auditRecorded,
    payload: Buffer.from(toBinary(AuditRecordedSchema, create(AuditRecordedSchema, { ...e, at: timestampFromDate(e.at) }))),
  }),
};

export function createIncidentEvents(outbox: Outbox): IncidentEvents {
  return {
    opened: (tx, e) =>
      outbox.write(tx, SUBJECTS.incidentOpened, IncidentOpenedSchema, create(IncidentOpenedSchema, { ...e, at: timestampFromDate(e.at) })),
    timelineRecorded: (tx, e) =>
      outbox.write(tx, SUBJECTS.timelineRecorded, TimelineRecordedSchema, create(TimelineRecordedSchema, { ...e, at: timestampFromDate(e.at) })),
    resolved: (tx, e) =>
      outbox.write(tx, SUBJECTS.incidentResolved, IncidentResolvedSchema, create(IncidentResolvedSchema, { ...e, at: timestampFromDate(e.at) })),
    audit: (tx, e) =>
      outbox.write(tx, SUBJECTS.auditRecorded, AuditRecordedSchema, create(AuditRecordedSchema, { ...e, at: timestampFromDate(e.at) })),
  };
}
