import type { JsonObject } from "@bufbuild/protobuf";
import type { CommsDeps } from "./deps.js";
import type { SentMessageRow } from "./store.js";

/** What a finished send leaves on the incident timeline. */
export interface SendRecord {
  messageId: string;
  orgId: string;
  incidentId: string;
  channel: string;
  label: string | null;
  body: string;
  /** sent, simulated or failed. */
  state: string;
  error: string | null;
  approvedBy: string | null;
  sentBy: string | null;
}

const SUMMARY_MAX = 500;

function clip(text: string, max: number): string {
  const chars = [...text];
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join("")}…`;
}

/**
 * The timeline entry of a send. The timeline knows two update kinds: `update_simulated` (egress
 * off, delivered nowhere) and `update_sent` (a post was made to the channel). A post the channel
 * refused is an `update_sent` entry whose data says `state: failed` and whose summary starts with
 * the error, so the room shows the refusal where the update would have been.
 */
export function timelineEntryOf(record: SendRecord): { kind: string; summary: string; data: JsonObject; eventId: string } {
  const target = record.label ? `chatwebhook (${record.label})` : "chatwebhook";
  let kind: string;
  let summary: string;
  if (record.state === "simulated") {
    kind = "update_simulated";
    summary = `Update recorded, not delivered (real egress is off) for ${target}: ${record.body}`;
  } else if (record.state === "sent") {
    kind = "update_sent";
    summary = `Update posted to ${target}: ${record.body}`;
  } else {
    kind = "update_sent";
    summary = `${record.error ?? "Chat webhook call failed"}: update not delivered to ${target}: ${record.body}`;
  }
  const data: JsonObject = {
    messageId: record.messageId,
    channel: record.channel,
    state: record.state,
    body: record.body,
    approvedBy: record.approvedBy,
    sentBy: record.sentBy,
  };
  if (record.label) data.label = record.label;
  if (record.error) data.error = record.error;
  // The same event id on a retry: the incident holds it once.
  return { kind, summary: clip(summary, SUMMARY_MAX), data, eventId: `comms-message:${record.messageId}` };
}

/** What the timeline writes need. */
type TimelineDeps = Pick<CommsDeps, "store" | "clients" | "logger">;

/** Appends the entry and marks the message as recorded. Throws when the incident core is unreachable. */
export async function recordOnTimeline(deps: TimelineDeps, record: SendRecord): Promise<void> {
  const entry = timelineEntryOf(record);
  await deps.clients.incidents.appendTimeline({ orgId: record.orgId, incidentId: record.incidentId, entry });
  await deps.store.markTimelineRecorded(record.messageId);
}

/**
 * The outcome of a send as the timeline and the `update.sent` event carry it, from the message's
 * row.
 */
export function sendRecordOf(row: SentMessageRow): SendRecord {
  return {
    messageId: row.id,
    orgId: row.org_id,
    incidentId: row.incident_id,
    channel: row.channel,
    label: row.label,
    body: row.body,
    state: row.state,
    error: row.error,
    approvedBy: row.approved_by,
    sentBy: row.sent_by,
  };
}

/**
 * Finished sends whose timeline entry did not get written (the incident core was unreachable at
 * the time): written now. No transaction is held across the calls to the incident core: the rows
 * are read, each entry is appended, and each row is marked in its own statement. Replicas may
 * pick the same row at the same moment; the entry's event id makes the incident hold it once.
 */
export async function recordPendingTimelineEntries(deps: TimelineDeps, olderThanSeconds: number): Promise<number> {
  const { store, logger } = deps;
  const rows = await store.unrecordedSends(olderThanSeconds, 50);
  let done = 0;
  for (const row of rows) {
    const entry = timelineEntryOf(sendRecordOf(row));
    try {
      await deps.clients.incidents.appendTimeline({ orgId: row.org_id, incidentId: row.incident_id, entry });
    } catch (err) {
      logger.warn({ messageId: row.id, err: String(err) }, "timeline entry still not written; will retry");
      continue;
    }
    await store.markTimelineRecorded(row.id);
    done++;
  }
  return done;
}
