import { randomUUID } from "node:crypto";
import type { AuditRecord } from "../../runtime/transport/events.js";
import type { Sealed } from "../../runtime/credentials/secret-box.js";
import type { CommsStore, MessageRow } from "../store.js";

/**
 * The comms tables in memory, for unit tests of the handlers: the same conditional moves as the
 * Postgres statements (approve at a version, one claim per send), with the events and audit
 * records the transactions would write kept in lists.
 */

export interface MemoryMessage extends MessageRow {
  origin: "person" | "war_room_link";
  draftedAt: number;
  finishedAt: number | null;
  timelineRecorded: boolean;
}

export interface MemoryCommsStore extends CommsStore {
  messages: MemoryMessage[];
  connections: Map<string, Sealed>;
  egress: Map<string, boolean>;
  secondApprover: Map<string, boolean>;
  audits: AuditRecord[];
  /** The `update.sent` events written, as "messageId:state". */
  updateSentEvents: string[];
}

/** An empty in-memory comms store. */
export function createMemoryCommsStore(): MemoryCommsStore {
  const messages: MemoryMessage[] = [];
  const connections = new Map<string, Sealed>();
  const egress = new Map<string, boolean>();
  const secondApprover = new Map<string, boolean>();
  const audits: AuditRecord[] = [];
  const updateSentEvents: string[] = [];
  let drafted = 0;
  const key = (orgId: string, name: string) => `${orgId}/${name}`;
  const rowOf = ({ origin: _o, draftedAt: _d, finishedAt: _f, timelineRecorded: _t, ...row }: MemoryMessage): MessageRow => ({ ...row });
  const byId = (id: string) => messages.find((m) => m.id === id);

  return {
    messages,
    connections,
    egress,
    secondApprover,
    audits,
    updateSentEvents,

    async egressEnabled(orgId) {
      return egress.get(orgId) ?? false;
    },
    async setEgress(orgId, enabled, _changedBy, audit) {
      const previous = egress.get(orgId) ?? false;
      egress.set(orgId, enabled);
      audits.push(audit(previous));
    },

    async hasConnection(orgId, name) {
      return connections.has(key(orgId, name));
    },
    async loadConnection(orgId, name) {
      return connections.get(key(orgId, name));
    },
    async resealConnection(orgId, name, previous, sealed) {
      const current = connections.get(key(orgId, name));
      if (current?.keyId === previous.keyId && current.ciphertext.equals(previous.ciphertext)) connections.set(key(orgId, name), sealed);
    },
    async saveConnection(orgId, name, sealed, _savedBy, audit) {
      const replaced = connections.has(key(orgId, name));
      connections.set(key(orgId, name), sealed);
      audits.push(audit(replaced));
    },
    async deleteConnection(orgId, name, audit) {
      if (connections.delete(key(orgId, name))) audits.push(audit);
    },
    async recordAudit(audit) {
      audits.push(audit);
    },

    async draftMessage(message) {
      const row: MemoryMessage = {
        id: randomUUID(),
        org_id: message.orgId,
        incident_id: message.incidentId,
        channel: message.channel,
        label: message.label,
        body: message.body,
        state: "drafted",
        version: 1,
        error: null,
        approved_by: null,
        sent_by: null,
        drafted_by: message.draftedBy,
        drafted_at: new Date(),
        edited_by: null,
        edited_at: null,
        approved_at: null,
        finished_at: null,
        origin: "person",
        draftedAt: ++drafted,
        finishedAt: null,
        timelineRecorded: false,
      };
      messages.push(row);
      return { id: row.id, version: row.version };
    },
    async draftWarRoomLink(message) {
      if (messages.some((m) => m.org_id === message.orgId && m.incident_id === message.incidentId && m.origin === "war_room_link")) return undefined;
      const { id } = await this.draftMessage(message);
      byId(id)!.origin = "war_room_link";
      return id;
    },
    async listMessages(orgId, incidentId, after, limit) {
      const all = messages.filter((m) => m.org_id === orgId && m.incident_id === incidentId).sort((a, b) => a.draftedAt - b.draftedAt);
      const from = after === undefined ? 0 : all.findIndex((m) => m.id === after) + 1;
      return all.slice(from, from + limit).map(rowOf);
    },
    async findMessage(orgId, incidentId, messageId) {
      const m = byId(messageId);
      return m && m.org_id === orgId && m.incident_id === incidentId ? rowOf(m) : undefined;
    },
    async editMessage(messageId, version, body, editedBy) {
      const m = byId(messageId);
      if (m?.state !== "drafted" || String(m.version) !== version) return undefined;
      Object.assign(m, { body, version: m.version + 1, edited_by: editedBy, edited_at: new Date() });
      return m.version;
    },
    async discardMessage(messageId, version) {
      const m = byId(messageId);
      if (m?.state !== "drafted" || (version !== undefined && String(m.version) !== version)) return false;
      Object.assign(m, { state: "discarded", version: m.version + 1 });
      return true;
    },
    async requireSecondApprover(orgId) {
      return secondApprover.get(orgId) ?? false;
    },
    async setRequireSecondApprover(orgId, value, _changedBy, audit) {
      const previous = secondApprover.get(orgId) ?? false;
      secondApprover.set(orgId, value);
      audits.push(audit(previous));
    },
    async approveMessage(messageId, version, approvedBy) {
      const m = byId(messageId);
      if (m?.state !== "drafted" || String(m.version) !== version) return undefined;
      Object.assign(m, { state: "approved", version: m.version + 1, approved_by: approvedBy, approved_at: new Date() });
      return m.version;
    },
    async claimSend(messageId, state, sentBy) {
      const m = byId(messageId);
      if (m?.state !== "approved") return undefined;
      Object.assign(m, { state, sent_by: sentBy, finishedAt: state === "simulated" ? Date.now() : null });
      if (state === "simulated") updateSentEvents.push(`${m.id}:simulated`);
      return rowOf(m);
    },
    async finishSend(messageId, outcome) {
      const m = byId(messageId);
      if (m?.state !== "sending") return undefined;
      Object.assign(m, { state: outcome.ok ? "sent" : "failed", error: outcome.ok ? null : outcome.error, finishedAt: Date.now() });
      if (outcome.ok) updateSentEvents.push(`${m.id}:sent`);
      return rowOf(m);
    },
    async markTimelineRecorded(messageId) {
      const m = byId(messageId);
      if (m) m.timelineRecorded = true;
    },
    async unrecordedSends(olderThanSeconds, limit) {
      const before = Date.now() - olderThanSeconds * 1000;
      return messages
        .filter((m) => !m.timelineRecorded && ["sent", "simulated", "failed"].includes(m.state) && m.finishedAt !== null && m.finishedAt < before)
        .sort((a, b) => a.finishedAt! - b.finishedAt!)
        .slice(0, limit)
        .map(rowOf);
    },
  };
}
