import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { UpdateSentSchema } from "../../gen/warroom/events/v1/events_pb.js";
import type { Sql, TransactionSql } from "../runtime/data/database.js";
import { EVENTS, recordAudit, type AuditRecord } from "../runtime/transport/events.js";
import type { Outbox } from "../runtime/data/outbox.js";
import type { Sealed } from "../runtime/credentials/secret-box.js";

/** What the comms handlers, the timeline sweep and the war-room link need from the comms tables. */

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

export interface MessageRow extends SentMessageRow {
  version: number;
  drafted_by?: string;
  drafted_at?: Date;
  edited_by?: string | null;
  edited_at?: Date | null;
  approved_at?: Date | null;
  finished_at?: Date | null;
}

/** A message written or approved: its id and version, for optimistic updates. */
export interface MessageVersionRow {
  id: string;
  version: number;
}

/** The organization's chat connection: the webhook URL, sealed. */
export interface ChatConnectionRow {
  key_id: string;
  url_ciphertext: Buffer;
}

export interface EgressSettingRow {
  enabled: boolean;
}

export interface NewMessage {
  orgId: string;
  incidentId: string;
  channel: string;
  label: string | null;
  body: string;
  draftedBy: string;
}

/** How a send ended: delivered, or refused with an error in words. */
export type SendOutcome = { ok: true } | { ok: false; error: string };

export interface CommsStore {
  /** Whether real egress is on for the organization: off unless an admin switched it on. */
  egressEnabled(orgId: string): Promise<boolean>;
  /** Sets the switch and writes the audit record, which is told the previous setting. */
  setEgress(orgId: string, enabled: boolean, changedBy: string, audit: (previous: boolean) => AuditRecord): Promise<void>;

  hasConnection(orgId: string, name: string): Promise<boolean>;
  /** The sealed webhook URL of the connection, or undefined when none is saved. */
  loadConnection(orgId: string, name: string): Promise<Sealed | undefined>;
  /** Replaces `previous` by `sealed`, unless the connection was saved again meanwhile. */
  resealConnection(orgId: string, name: string, previous: Sealed, sealed: Sealed): Promise<void>;
  /** Saves the connection and writes the audit record, which is told whether one was replaced. */
  saveConnection(orgId: string, name: string, sealed: Sealed, savedBy: string, audit: (replaced: boolean) => AuditRecord): Promise<void>;
  /** Deletes the connection, and writes the audit record when there was one. */
  deleteConnection(orgId: string, name: string, audit: AuditRecord): Promise<void>;
  /** An audit record on its own. */
  recordAudit(audit: AuditRecord): Promise<void>;

  draftMessage(message: NewMessage): Promise<{ id: string; version: number }>;
  /** Drafts the war-room link of an incident once: undefined when it was drafted before. */
  draftWarRoomLink(message: NewMessage): Promise<string | undefined>;
  /** A page of the incident's messages in the order they were drafted, after message `after` when given. */
  listMessages(orgId: string, incidentId: string, after: string | undefined, limit: number): Promise<MessageRow[]>;
  findMessage(orgId: string, incidentId: string, messageId: string): Promise<MessageRow | undefined>;
  /** Replaces a draft's body at `version`; its new version, or undefined when it is not a draft at that version. */
  editMessage(messageId: string, version: string, body: string, editedBy: string): Promise<number | undefined>;
  /** Marks a draft discarded (at `version` when given); false when it is not a draft (at that version). */
  discardMessage(messageId: string, version: string | undefined): Promise<boolean>;
  /** Whether a second person must approve an update: off unless an admin switched it on. */
  requireSecondApprover(orgId: string): Promise<boolean>;
  /** Sets the second-approver setting and writes the audit record, which is told the previous setting. */
  setRequireSecondApprover(orgId: string, value: boolean, changedBy: string, audit: (previous: boolean) => AuditRecord): Promise<void>;
  /** Approves a draft at `version`; its new version, or undefined when it is not a draft at that version. */
  approveMessage(messageId: string, version: string, approvedBy: string): Promise<number | undefined>;
  /**
   * Moves an approved message to `sending`, or straight to `simulated` with its `update.sent`
   * event; undefined when it is no longer approved (another send took it).
   */
  claimSend(messageId: string, state: "sending" | "simulated", sentBy: string): Promise<MessageRow | undefined>;
  /** Ends a send: `sent` with its `update.sent` event, or `failed` with the error. */
  finishSend(messageId: string, outcome: SendOutcome): Promise<MessageRow | undefined>;
  markTimelineRecorded(messageId: string): Promise<void>;
  /** Finished sends older than `olderThanSeconds` whose timeline entry is not written, oldest first. */
  unrecordedSends(olderThanSeconds: number, limit: number): Promise<SentMessageRow[]>;
}

const COLUMNS =
  "id, org_id, incident_id, channel, label, body, state, version, error, approved_by, sent_by, drafted_by, drafted_at, edited_by, edited_at, approved_at, finished_at";

/** The comms store on Postgres; events and audit records go to `outbox` in the same transactions. */
export function createPostgresCommsStore(deps: { sql: Sql; outbox: Outbox }): CommsStore {
  const { sql, outbox } = deps;

  async function updateSent(tx: TransactionSql, row: MessageRow, state: "sent" | "simulated"): Promise<void> {
    await outbox.write(
      tx,
      EVENTS.updateSent,
      create(UpdateSentSchema, { orgId: row.org_id, incidentId: row.incident_id, messageId: row.id, state, at: timestampNow() }),
    );
  }

  return {
    async egressEnabled(orgId) {
      const [row] = await sql<EgressSettingRow[]>`select enabled from comms.egress_settings where org_id = ${orgId}`;
      return row?.enabled ?? false;
    },

    async setEgress(orgId, enabled, changedBy, audit) {
      await sql.begin(async (tx) => {
        const [previous] = await tx<EgressSettingRow[]>`select enabled from comms.egress_settings where org_id = ${orgId} for update`;
        await tx`
          insert into comms.egress_settings (org_id, enabled, changed_by) values (${orgId}, ${enabled}, ${changedBy})
          on conflict (org_id) do update set enabled = excluded.enabled, changed_by = excluded.changed_by, changed_at = now()`;
        await recordAudit(outbox, tx, audit(previous?.enabled ?? false));
      });
    },

    async hasConnection(orgId, name) {
      const rows = await sql`select 1 from comms.chat_connections where org_id = ${orgId} and name = ${name}`;
      return rows.length > 0;
    },

    async loadConnection(orgId, name) {
      const [row] = await sql<ChatConnectionRow[]>`
        select key_id, url_ciphertext from comms.chat_connections where org_id = ${orgId} and name = ${name}`;
      return row && { keyId: row.key_id, ciphertext: row.url_ciphertext };
    },

    async resealConnection(orgId, name, previous, sealed) {
      // Conditional on the old key id: a concurrent save is never overwritten with the older URL.
      await sql`
        update comms.chat_connections set key_id = ${sealed.keyId}, url_ciphertext = ${sealed.ciphertext}
        where org_id = ${orgId} and name = ${name} and key_id = ${previous.keyId} and url_ciphertext = ${previous.ciphertext}`;
    },

    async saveConnection(orgId, name, sealed, savedBy, audit) {
      await sql.begin(async (tx) => {
        const [previous] = await tx`select 1 from comms.chat_connections where org_id = ${orgId} and name = ${name} for update`;
        await tx`
          insert into comms.chat_connections (org_id, name, key_id, url_ciphertext, saved_by)
          values (${orgId}, ${name}, ${sealed.keyId}, ${sealed.ciphertext}, ${savedBy})
          on conflict (org_id, name) do update
            set key_id = excluded.key_id, url_ciphertext = excluded.url_ciphertext, saved_by = excluded.saved_by, saved_at = now()`;
        await recordAudit(outbox, tx, audit(previous !== undefined));
      });
    },

    async deleteConnection(orgId, name, audit) {
      await sql.begin(async (tx) => {
        const deleted = await tx`delete from comms.chat_connections where org_id = ${orgId} and name = ${name} returning 1`;
        if (deleted.length > 0) await recordAudit(outbox, tx, audit);
      });
    },

    async recordAudit(audit) {
      await sql.begin((tx) => recordAudit(outbox, tx, audit));
    },

    async draftMessage(message) {
      const [row] = await sql<MessageVersionRow[]>`
        insert into comms.messages (org_id, incident_id, channel, label, body, drafted_by)
        values (${message.orgId}, ${message.incidentId}, ${message.channel}, ${message.label}, ${message.body}, ${message.draftedBy})
        returning id, version`;
      return row!;
    },

    async draftWarRoomLink(message) {
      const [row] = await sql<Pick<MessageVersionRow, "id">[]>`
        insert into comms.messages (org_id, incident_id, channel, body, origin, drafted_by)
        values (${message.orgId}, ${message.incidentId}, ${message.channel}, ${message.body}, 'war_room_link', ${message.draftedBy})
        on conflict (org_id, incident_id) where origin = 'war_room_link' do nothing
        returning id`;
      return row?.id;
    },

    async listMessages(orgId, incidentId, after, limit) {
      return sql.unsafe<MessageRow[]>(
        `select ${COLUMNS} from comms.messages where org_id = $1 and incident_id = $2
           and ($3::uuid is null or (drafted_at, id) > (select drafted_at, id from comms.messages where org_id = $1 and id = $3::uuid))
         order by drafted_at, id limit $4`,
        [orgId, incidentId, after ?? null, limit],
      );
    },

    async findMessage(orgId, incidentId, messageId) {
      const [row] = await sql.unsafe<MessageRow[]>(`select ${COLUMNS} from comms.messages where id = $1 and org_id = $2 and incident_id = $3`, [
        messageId,
        orgId,
        incidentId,
      ]);
      return row;
    },

    async editMessage(messageId, version, body, editedBy) {
      const [edited] = await sql<Pick<MessageVersionRow, "version">[]>`
        update comms.messages set body = ${body}, version = version + 1, edited_by = ${editedBy}, edited_at = now()
        where id = ${messageId} and state = 'drafted' and version::text = ${version}
        returning version`;
      return edited?.version;
    },

    async discardMessage(messageId, version) {
      const rows = await sql`
        update comms.messages set state = 'discarded', version = version + 1
        where id = ${messageId} and state = 'drafted' and (${version ?? null}::text is null or version::text = ${version ?? null}::text)
        returning id`;
      return rows.length > 0;
    },

    async requireSecondApprover(orgId) {
      const [row] = await sql<{ require_second_approver: boolean }[]>`
        select require_second_approver from comms.approval_settings where org_id = ${orgId}`;
      return row?.require_second_approver ?? false;
    },

    async setRequireSecondApprover(orgId, value, changedBy, audit) {
      await sql.begin(async (tx) => {
        const [previous] = await tx<{ require_second_approver: boolean }[]>`
          select require_second_approver from comms.approval_settings where org_id = ${orgId} for update`;
        await tx`
          insert into comms.approval_settings (org_id, require_second_approver, changed_by) values (${orgId}, ${value}, ${changedBy})
          on conflict (org_id) do update set require_second_approver = excluded.require_second_approver, changed_by = excluded.changed_by, changed_at = now()`;
        await recordAudit(outbox, tx, audit(previous?.require_second_approver ?? false));
      });
    },

    async approveMessage(messageId, version, approvedBy) {
      const [approved] = await sql<Pick<MessageVersionRow, "version">[]>`
        update comms.messages set state = 'approved', version = version + 1, approved_by = ${approvedBy}, approved_at = now()
        where id = ${messageId} and state = 'drafted' and version::text = ${version}
        returning version`;
      return approved?.version;
    },

    async claimSend(messageId, state, sentBy) {
      return sql.begin(async (tx) => {
        const [row] = await tx.unsafe<MessageRow[]>(
          `update comms.messages
             set state = $1, sent_by = $2, claimed_at = now(), finished_at = case when $1 = 'simulated' then now() end
           where id = $3 and state = 'approved'
           returning ${COLUMNS}`,
          [state, sentBy, messageId],
        );
        if (row && state === "simulated") await updateSent(tx, row, "simulated");
        return row;
      });
    },

    async finishSend(messageId, outcome) {
      return sql.begin(async (tx) => {
        const [row] = await tx.unsafe<MessageRow[]>(
          `update comms.messages set state = $1, error = $2, finished_at = now()
           where id = $3 and state = 'sending'
           returning ${COLUMNS}`,
          [outcome.ok ? "sent" : "failed", outcome.ok ? null : outcome.error, messageId],
        );
        if (row && outcome.ok) await updateSent(tx, row, "sent");
        return row;
      });
    },

    async markTimelineRecorded(messageId) {
      await sql`update comms.messages set timeline_recorded = true where id = ${messageId}`;
    },

    async unrecordedSends(olderThanSeconds, limit) {
      return sql<SentMessageRow[]>`
        select id, org_id, incident_id, channel, label, body, state, error, approved_by, sent_by
        from comms.messages
        where timeline_recorded = false and state in ('sent', 'simulated', 'failed')
          and finished_at < now() - make_interval(secs => ${olderThanSeconds})
        order by finished_at limit ${limit}`;
    },
  };
}
