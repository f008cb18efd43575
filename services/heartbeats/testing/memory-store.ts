import { randomUUID } from "node:crypto";
import type { AuditRecord } from "../../runtime/transport/events.js";
import {
  type Claim,
  type ClaimedAlert,
  type ClaimedResume,
  type HeartbeatRow,
  type HeartbeatStore,
  type NewHeartbeat,
  OrganizationFullError,
  type RecordedAlert,
  type SilenceCause,
  type StoredPingKey,
} from "../store.js";

/**
 * The heartbeats tables in memory, on a clock the test moves, for unit tests of the handlers, the
 * sweep and the deliveries. It keeps the rules the Postgres statements keep (one open silence per
 * heartbeat, a claim is a lease under a token, a resume waits for its alert); pings and their runs
 * are not modelled (the ping statement is the Postgres store's alone), so no run ever overruns here.
 */

export interface MemoryHeartbeat {
  id: string;
  orgId: string;
  orgSlug: string;
  name: string;
  interval: number | null;
  schedule: string | null;
  timezone: string | null;
  gapSeconds: number | null;
  grace: number;
  maxRun: number | null;
  minRun: number | null;
  misses: number;
  pausedAt: Date | null;
  createdAt: Date;
  lastSeenAt: Date | null;
  deadline: Date;
  openSilenceId: string | null;
  pingKey: StoredPingKey | null;
}

export interface MemorySilence {
  id: string;
  heartbeatId: string;
  cause: SilenceCause;
  deadline: Date;
  since: Date;
  neverPinged: boolean;
  detectedAt: Date;
  alertRecordedAt: Date | null;
  alertOutcome: string | null;
  incidentId: string | null;
  suppressedUntil: Date | null;
  suppressedBy: string | null;
  endedAt: Date | null;
  resumeRecordedAt: Date | null;
  resumeOutcome: string | null;
  claimToken: string | null;
  claimUntil: Date | null;
}

export interface MemoryHeartbeatStore extends HeartbeatStore {
  heartbeats: MemoryHeartbeat[];
  silences: MemorySilence[];
  audits: AuditRecord[];
  /** Heartbeats declared silent, in the order their events were written. */
  silentEvents: string[];
  now(): Date;
  advance(seconds: number): void;
  /** What a ping does to a silent heartbeat: the open silence ends and the deadline moves on. */
  endSilence(name: string): MemorySilence;
}

/** An empty in-memory heartbeats store whose clock starts at `start`. */
export function createMemoryHeartbeatStore(start = new Date("2026-03-02T10:00:00Z")): MemoryHeartbeatStore {
  let clock = start.getTime();
  const now = () => new Date(clock);
  const heartbeats: MemoryHeartbeat[] = [];
  const silences: MemorySilence[] = [];
  const audits: AuditRecord[] = [];
  const silentEvents: string[] = [];

  const rowOf = (h: MemoryHeartbeat): HeartbeatRow => ({
    id: h.id,
    org_id: h.orgId,
    name: h.name,
    expected_interval_seconds: h.interval,
    grace_seconds: h.grace,
    schedule: h.schedule,
    timezone: h.timezone,
    max_run_seconds: h.maxRun,
    min_run_seconds: h.minRun,
    alert_after_misses: h.misses,
    open_incident_id: silences.find((s) => s.id === h.openSilenceId)?.incidentId ?? null,
    created_at: h.createdAt,
    last_seen_at: h.lastSeenAt,
    deadline: h.deadline,
    silent: h.openSilenceId !== null || h.deadline.getTime() < clock,
    paused_at: h.pausedAt,
    last_ping_at: null,
    last_ping_kind: null,
    last_ping_exit_status: null,
    last_ping_run_seconds: null,
    last_ping_body: null,
    last_ping_body_cut: null,
    last_ping_body_bytes: null,
    running_since: null,
    ping_key_sealed: h.pingKey?.sealed ?? null,
    ping_key_sealed_by: h.pingKey?.sealedBy ?? null,
  });
  const find = (orgId: string, name: string) => heartbeats.find((h) => h.orgId === orgId && h.name === name);
  const heartbeatOf = (s: MemorySilence) => heartbeats.find((h) => h.id === s.heartbeatId)!;
  const claimable = (s: MemorySilence, claim: Claim) =>
    (claim.onlySilenceId === undefined || s.id === claim.onlySilenceId) &&
    (s.claimUntil === null || s.claimUntil.getTime() < clock) &&
    s.claimToken !== claim.token;
  const lease = (s: MemorySilence, claim: Claim) => {
    s.claimToken = claim.token;
    s.claimUntil = new Date(clock + claim.leaseSeconds * 1000);
  };
  /** Leases the silence to the claim; answers its heartbeat and the fields every claimed row starts with. */
  const claimRow = (s: MemorySilence, claim: Claim) => {
    lease(s, claim);
    const h = heartbeatOf(s);
    return { h, row: { id: s.id, cause: s.cause, since: s.since, org_id: h.orgId, org_slug: h.orgSlug, name: h.name } };
  };
  const silentSeconds = (s: MemorySilence) => ((s.endedAt?.getTime() ?? clock) - s.since.getTime()) / 1000;
  const byTime = (at: (s: MemorySilence) => Date | null) => (a: MemorySilence, b: MemorySilence) => at(a)!.getTime() - at(b)!.getTime();

  return {
    heartbeats,
    silences,
    audits,
    silentEvents,
    now,
    advance(seconds) {
      clock += seconds * 1000;
    },
    endSilence(name) {
      const h = heartbeats.find((x) => x.name === name && x.openSilenceId !== null);
      if (!h) throw new Error(`heartbeat ${name} is not silent`);
      const silence = silences.find((s) => s.id === h.openSilenceId)!;
      silence.endedAt = now();
      h.openSilenceId = null;
      h.lastSeenAt = now();
      h.deadline = new Date(clock + ((h.interval ?? 0) * h.misses + h.grace) * 1000);
      return silence;
    },

    async register(heartbeat: NewHeartbeat, deadlineFrom, audit, atMost) {
      if (find(heartbeat.orgId, heartbeat.name)) return undefined;
      if (atMost !== undefined && heartbeats.filter((h) => h.orgId === heartbeat.orgId).length >= atMost) throw new OrganizationFullError(atMost);
      const h: MemoryHeartbeat = {
        id: randomUUID(),
        ...heartbeat,
        createdAt: now(),
        lastSeenAt: null,
        deadline: deadlineFrom(now()),
        openSilenceId: null,
        pausedAt: null,
      };
      const row = rowOf(h);
      audits.push(audit(row));
      heartbeats.push(h);
      return row;
    },

    async list(orgId, after, limit) {
      return heartbeats
        .filter((h) => h.orgId === orgId && (after === undefined || h.name > after))
        .sort((a, b) => (a.name < b.name ? -1 : 1))
        .slice(0, limit)
        .map(rowOf);
    },

    async get(orgId, name) {
      const h = find(orgId, name);
      return h && rowOf(h);
    },

    async update(orgId, name, change, audit) {
      const h = find(orgId, name);
      if (!h) return undefined;
      // Computed before anything is written: a refusal leaves the heartbeat as it was.
      const next = change({
        interval: h.interval,
        schedule: h.schedule,
        timezone: h.timezone,
        grace: h.grace,
        maxRun: h.maxRun,
        minRun: h.minRun,
        misses: h.misses,
        since: h.lastSeenAt ?? h.createdAt,
        paused: h.pausedAt !== null,
      });
      Object.assign(h, {
        interval: next.interval,
        schedule: next.schedule,
        timezone: next.timezone,
        gapSeconds: next.schedule ? (next.gapSeconds ?? h.gapSeconds) : null,
        grace: next.grace,
        maxRun: next.maxRun === undefined ? h.maxRun : next.maxRun,
        minRun: next.minRun === undefined ? h.minRun : next.minRun,
        misses: next.misses,
        deadline: next.deadline,
        pausedAt: next.paused === undefined ? h.pausedAt : next.paused ? (h.pausedAt ?? now()) : null,
      });
      const row = rowOf(h);
      audits.push(audit(row));
      return row;
    },

    async rotatePingKey(orgId, name, key, audit) {
      const h = find(orgId, name);
      if (!h) return undefined;
      h.pingKey = key;
      audits.push(audit);
      return rowOf(h);
    },

    async issueOrgPingKey(orgId, _orgSlug, _hash, _allowCreate, audit) {
      // Org ping keys are looked up by the ping statement's own lookup, on Postgres only.
      audits.push({ ...audit, orgId });
    },

    async keyless(limit) {
      return heartbeats
        .filter((h) => h.pingKey === null)
        .slice(0, limit)
        .map((h) => ({ org_id: h.orgId, name: h.name }));
    },

    async giveKey(orgId, name, key) {
      const h = find(orgId, name);
      if (!h || h.pingKey) return false;
      h.pingKey = key;
      return true;
    },

    async delete(orgId, name, audit) {
      const h = find(orgId, name);
      if (!h) return false;
      heartbeats.splice(heartbeats.indexOf(h), 1);
      audits.push(audit);
      return true;
    },

    async detectSilences(limit) {
      const due = heartbeats
        .filter((h) => h.openSilenceId === null && h.deadline.getTime() < clock)
        .sort((a, b) => a.deadline.getTime() - b.deadline.getTime())
        .slice(0, limit);
      for (const h of due) {
        const silence: MemorySilence = {
          id: randomUUID(),
          heartbeatId: h.id,
          cause: "silence",
          deadline: h.deadline,
          since: h.lastSeenAt ?? h.createdAt,
          neverPinged: h.lastSeenAt === null,
          detectedAt: now(),
          alertRecordedAt: null,
          alertOutcome: null,
          incidentId: null,
          suppressedUntil: null,
          suppressedBy: null,
          endedAt: null,
          resumeRecordedAt: null,
          resumeOutcome: null,
          claimToken: null,
          claimUntil: null,
        };
        silences.push(silence);
        h.openSilenceId = silence.id;
        silentEvents.push(h.name);
      }
      return due.length;
    },

    async detectOverruns() {
      return 0;
    },

    async cleanup(keepDays) {
      const before = clock - keepDays * 86_400_000;
      for (const s of [...silences]) {
        const resumedLongAgo = s.resumeRecordedAt !== null && s.resumeRecordedAt.getTime() < before;
        const alertedAlongside =
          s.endedAt === null &&
          s.alertRecordedAt !== null &&
          s.alertRecordedAt.getTime() < before &&
          s.suppressedUntil === null &&
          !heartbeats.some((h) => h.openSilenceId === s.id);
        if (resumedLongAgo || alertedAlongside) silences.splice(silences.indexOf(s), 1);
      }
    },

    async claimAlerts(claim) {
      const neverRecorded = silences
        .filter((s) => s.alertRecordedAt === null && claimable(s, claim))
        .sort(byTime((s) => s.detectedAt))
        .slice(0, claim.limit);
      const heldBack = silences
        .filter((s) => s.suppressedUntil !== null && s.suppressedUntil.getTime() <= clock && heartbeatOf(s).openSilenceId === s.id && claimable(s, claim))
        .sort(byTime((s) => s.suppressedUntil))
        .slice(0, claim.limit);
      return [...new Set([...neverRecorded, ...heldBack])].map((s): ClaimedAlert => {
        const { h, row } = claimRow(s, claim);
        if (s.suppressedUntil !== null) s.alertRecordedAt = null;
        return {
          ...row,
          deadline: s.deadline,
          never_pinged: s.neverPinged,
          expected_interval_seconds: h.interval,
          schedule: h.schedule,
          timezone: h.timezone,
          grace_seconds: h.grace,
          max_run_seconds: h.maxRun,
          min_run_seconds: h.minRun,
          alert_after_misses: h.misses,
          silent_seconds: silentSeconds(s),
          exit_status: null,
          body: null,
          body_cut: null,
          body_bytes: null,
          run_id: null,
          suppressed_by: s.suppressedBy,
          db_now: now(),
          last_kind: null,
          last_ping_at: null,
          last_run_seconds: null,
          unfinished_start: null,
          during: null,
        };
      });
    },

    async markAlertsRecorded(token, recorded: RecordedAlert[]) {
      for (const r of recorded) {
        const s = silences.find((x) => x.id === r.id && x.claimToken === token);
        if (!s) continue;
        Object.assign(s, {
          alertRecordedAt: now(),
          alertOutcome: r.outcome,
          incidentId: r.incidentId || s.incidentId,
          suppressedUntil: r.suppressedUntil,
          suppressedBy: r.suppressedBy ?? s.suppressedBy,
          claimToken: null,
          claimUntil: null,
        });
      }
    },

    async claimResumes(claim) {
      return silences
        .filter((s) => s.endedAt !== null && s.resumeRecordedAt === null && s.alertRecordedAt !== null && claimable(s, claim))
        .sort(byTime((s) => s.endedAt))
        .slice(0, claim.limit)
        .map((s): ClaimedResume => {
          const { row } = claimRow(s, claim);
          return {
            ...row,
            ended_at: s.endedAt!,
            silent_seconds: silentSeconds(s),
            ended_body: null,
            ended_body_cut: null,
            ended_body_bytes: null,
            ended_run_seconds: null,
          };
        });
    },

    async markResumeRecorded(token, silenceId, outcome) {
      const s = silences.find((x) => x.id === silenceId && x.claimToken === token);
      if (!s) return;
      Object.assign(s, { resumeRecordedAt: now(), resumeOutcome: outcome, claimToken: null, claimUntil: null });
    },

    async release(token, silenceIds) {
      for (const s of silences) if (silenceIds.includes(s.id) && s.claimToken === token) s.claimUntil = now();
    },
  };
}
