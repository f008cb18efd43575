import type { JsonObject } from "@bufbuild/protobuf";
import type { CommsDeps } from "./deps.js";

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

/** Appends the entry and marks the message as recorded. Throws when the incident core is unreachable. */
export async function recordOnTimeline(deps: CommsDeps, record: SendRecord): Promise<void> {
  const entry = timelineEntryOf(record);
  await deps.ctx.clients.incidents.appendTimeline({ orgId: record.orgId, incidentId: record.incidentId, entry });
  await deps.ctx.sql`update comms.messages set timeline_recorded = true where id = ${record.messageId}`;
}

/** The columns of a message row the timeline needs. */
export interface SentMessageRow {
  id: string;
  org_id: string;
  incident_id: string;
  channel: string;
  label: string | null;
  body: string;
  state: string;
  error: string | null;
  approved_by: string | null;
  sent_by: string | null;
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
export async function recordPendingTimelineEntries(deps: CommsDeps, olderThanSeconds: number): Promise<number> {
  const { sql, logger } = deps.ctx;
  const rows = await sql<SentMessageRow[]>`
    select id, org_id, incident_id, channel, label, body, state, error, approved_by, sent_by
    from comms.messages
    where timeline_recorded = false and state in ('sent', 'simulated', 'failed')
      and finished_at < now() - make_interval(secs => ${olderThanSeconds})
    order by finished_at limit 50`;
  let done = 0;
  for (const row of rows) {
    const entry = timelineEntryOf(sendRecordOf(row));
    try {
      await deps.ctx.clients.incidents.appendTimeline({ orgId: row.org_id, incidentId: row.incident_id, entry });
    } catch (err) {
      logger.warn({ messageId: row.id, err: String(err) }, "timeline entry still not written; will retry");
      continue;
    }
    await sql`update comms.messages set timeline_recorded = true where id = ${row.id}`;
    done++;
  }
  return done;
}
