import { randomUUID } from "node:crypto";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Clients } from "../runtime/clients.js";
import type { Sql } from "../runtime/database.js";
import type { Logger } from "../runtime/logger.js";
import { mapBounded } from "../runtime/map-bounded.js";
import { formatDuration } from "./heartbeat-rules.js";

/**
 * Hands silences to the incident core: the `alert` that opens (or attaches to) the incident, and
 * the `resumed` entry once a ping ends the silence.
 *
 * A delivery is claimed first (a lease on the silence row, committed), then Record is called, then
 * the row is marked delivered. Only the holder of a live lease delivers, so replicas never
 * deliver the same thing side by side. A process that dies after claiming leaves a lease that
 * expires; whoever takes it over calls Record again with the same event id, which the incident
 * core holds once (and the attach identity keeps one open incident per heartbeat anyway).
 */

/** How long a claim holds; longer than a batch can take with every Record at its timeout. */
export const LEASE_SECONDS = 120;
const RECORD_TIMEOUT_MS = 10_000;
const BATCH = 200;
const CONCURRENCY = 16;

export const SOURCE_BADGE = "heartbeat";
export const attachIdentity = (name: string) => `heartbeat:${name}`;
export const silenceEventId = (silenceId: string) => `heartbeat-silence:${silenceId}`;
export const resumedEventId = (silenceId: string) => `heartbeat-resumed:${silenceId}`;

export interface AlertCounts {
  delivered: number;
  opened: number;
  suppressed: number;
  failed: number;
}

export interface ResumeCounts {
  resumed: number;
  failed: number;
}

interface ClaimedAlert {
  id: string;
  deadline: Date;
  since: Date;
  never_pinged: boolean;
  org_id: string;
  org_slug: string;
  name: string;
  expected_interval_seconds: number;
  grace_seconds: number;
  silent_seconds: number;
}

interface Recorded {
  id: string;
  outcome: string;
  incidentId: string;
}

interface ClaimedResume {
  id: string;
  since: Date;
  org_id: string;
  org_slug: string;
  name: string;
  silence_ended_at: Date;
  silent_seconds: number;
}

export interface SilenceDelivery {
  /** Delivers every alert not yet recorded whose lease is free. */
  deliverAlerts(token: string): Promise<AlertCounts>;
  /** Delivers `resumed` for silences ended by a ping (all of them, or the one given). */
  deliverResumes(token: string, onlySilenceId?: string): Promise<ResumeCounts>;
  /** Delivers the `resumed` of one silence in the background, right after the ping that ended it. */
  resumeSoon(silenceId: string): void;
  /** Waits for background deliveries (shutdown). */
  settle(): Promise<void>;
}

export function createSilenceDelivery(deps: { sql: Sql; clients: Clients; logger: Logger }): SilenceDelivery {
  const { sql, clients, logger } = deps;
  const background = new Set<Promise<unknown>>();

  async function claimAlerts(token: string): Promise<ClaimedAlert[]> {
    return sql<ClaimedAlert[]>`
      update heartbeats.silences s set claim_token = ${token}, claim_until = now() + make_interval(secs => ${LEASE_SECONDS})
      from heartbeats.heartbeats h
      where h.id = s.heartbeat_id
        and s.id in (
          select id from heartbeats.silences
          where alert_recorded_at is null
            and (claim_until is null or claim_until < now())
            and claim_token is distinct from ${token}
          order by detected_at
          limit ${BATCH}
          for update skip locked)
      returning s.id, s.deadline, s.since, s.never_pinged, h.org_id, h.org_slug, h.name,
        h.expected_interval_seconds, h.grace_seconds,
        extract(epoch from (case when h.ended_silence_id = s.id then h.silence_ended_at else now() end) - s.since)::float8 as silent_seconds`;
  }

  async function recordAlert(token: string, row: ClaimedAlert): Promise<Recorded | undefined> {
    const silentFor = formatDuration(row.silent_seconds);
    const every = formatDuration(row.expected_interval_seconds);
    const grace = formatDuration(row.grace_seconds);
    const summary = row.never_pinged
      ? `No ping from ${row.name} since it was registered at ${row.since.toISOString()} (${silentFor} ago); it expects one every ${every} with ${grace} of grace.`
      : `Last ping from ${row.name} at ${row.since.toISOString()}, ${silentFor} ago; it expects one every ${every} with ${grace} of grace.`;
    try {
      const response = await clients.incidents.record(
        {
          orgId: row.org_id,
          orgSlug: row.org_slug,
          alert: {
            source: SOURCE_BADGE,
            attachIdentity: attachIdentity(row.name),
            eventId: silenceEventId(row.id),
            kind: "alert",
            title: `Heartbeat ${row.name} silent for ${silentFor}`,
            severity: "sev2",
            entity: { kind: "heartbeat", id: row.name },
            summary,
            occurredAt: timestampFromDate(row.deadline),
            data: {
              heartbeat: row.name,
              expectedIntervalSeconds: row.expected_interval_seconds,
              graceSeconds: row.grace_seconds,
              lastSeenAt: row.never_pinged ? null : row.since.toISOString(),
              deadline: row.deadline.toISOString(),
              silentSeconds: Math.floor(row.silent_seconds),
            },
          },
        },
        { timeoutMs: RECORD_TIMEOUT_MS },
      );
      return { id: row.id, outcome: response.outcome, incidentId: response.incident?.id ?? "" };
    } catch (err) {
      await release(token, row.id);
      logger.warn({ err: String(err), heartbeat: row.name, silence: row.id }, "could not hand a silence to the incident core; the next sweep retries");
      return undefined;
    }
  }

  /**
   * Marks a batch delivered in one statement. Until it commits the silences stay claimed; if it
   * never does, the lease expires and they are handed over again under the same event ids.
   */
  async function markAlertsRecorded(token: string, recorded: Recorded[]): Promise<void> {
    if (recorded.length === 0) return;
    await sql`
      update heartbeats.silences s
      set alert_recorded_at = now(), alert_outcome = d.outcome, incident_id = nullif(d.incident_id, ''),
          claim_token = null, claim_until = null
      from unnest(${recorded.map((r) => r.id)}::uuid[], ${recorded.map((r) => r.outcome)}::text[], ${recorded.map((r) => r.incidentId)}::text[])
        as d(id, outcome, incident_id)
      where s.id = d.id and s.claim_token = ${token}`;
  }

  async function claimResumes(token: string, onlySilenceId: string | undefined): Promise<ClaimedResume[]> {
    return sql<ClaimedResume[]>`
      update heartbeats.silences s set claim_token = ${token}, claim_until = now() + make_interval(secs => ${LEASE_SECONDS})
      from heartbeats.heartbeats h
      where h.ended_silence_id = s.id
        and s.id in (
          select s2.id from heartbeats.heartbeats h2 join heartbeats.silences s2 on s2.id = h2.ended_silence_id
          where h2.ended_silence_id is not null
            ${onlySilenceId ? sql`and h2.ended_silence_id = ${onlySilenceId}` : sql``}
            -- The alert goes first: a resume whose alert is still pending waits for it.
            and s2.alert_recorded_at is not null
            and s2.resume_recorded_at is null
            and (s2.claim_until is null or s2.claim_until < now())
            and s2.claim_token is distinct from ${token}
          order by h2.silence_ended_at
          limit ${BATCH}
          for update of s2 skip locked)
      returning s.id, s.since, h.org_id, h.org_slug, h.name, h.silence_ended_at,
        extract(epoch from h.silence_ended_at - s.since)::float8 as silent_seconds`;
  }

  async function deliverResume(token: string, row: ClaimedResume): Promise<boolean> {
    const silentFor = formatDuration(row.silent_seconds);
    try {
      const response = await clients.incidents.record(
        {
          orgId: row.org_id,
          orgSlug: row.org_slug,
          alert: {
            source: SOURCE_BADGE,
            attachIdentity: attachIdentity(row.name),
            eventId: resumedEventId(row.id),
            kind: "resumed",
            title: `Heartbeat ${row.name} resumed after ${silentFor} of silence`,
            severity: "sev2",
            entity: { kind: "heartbeat", id: row.name },
            summary: `Ping received from ${row.name} at ${row.silence_ended_at.toISOString()} after ${silentFor} of silence.`,
            occurredAt: timestampFromDate(row.silence_ended_at),
            data: { heartbeat: row.name, resumedAt: row.silence_ended_at.toISOString(), silentSeconds: Math.floor(row.silent_seconds) },
          },
        },
        { timeoutMs: RECORD_TIMEOUT_MS },
      );
      // One statement: the silence is done and the heartbeat no longer points at it.
      await sql`
        with done as (
          update heartbeats.silences
          set resume_recorded_at = now(), resume_outcome = ${response.outcome}, claim_token = null, claim_until = null
          where id = ${row.id} and claim_token = ${token}
          returning id, heartbeat_id)
        update heartbeats.heartbeats h set ended_silence_id = null, silence_ended_at = null
        from done where h.id = done.heartbeat_id and h.ended_silence_id = done.id`;
      return true;
    } catch (err) {
      await release(token, row.id);
      logger.warn({ err: String(err), heartbeat: row.name, silence: row.id }, "could not record that a heartbeat resumed; the next sweep retries");
      return false;
    }
  }

  /**
   * Ends the lease now but keeps this pass's token on the row, so the same pass does not pick the
   * row again; the next pass (another token) retries it.
   */
  async function release(token: string, silenceId: string): Promise<void> {
    await sql`update heartbeats.silences set claim_until = now() where id = ${silenceId} and claim_token = ${token}`.catch((err) =>
      logger.warn({ err: String(err), silence: silenceId }, "could not release a claim; it expires by itself"),
    );
  }

  const delivery: SilenceDelivery = {
    async deliverAlerts(token) {
      const counts: AlertCounts = { delivered: 0, opened: 0, suppressed: 0, failed: 0 };
      for (;;) {
        const rows = await claimAlerts(token);
        if (rows.length === 0) break;
        const results = await mapBounded(rows, CONCURRENCY, (row) => recordAlert(token, row));
        const recorded = results.filter((r): r is Recorded => r !== undefined);
        await markAlertsRecorded(token, recorded);
        const failedHere = rows.length - recorded.length;
        counts.delivered += recorded.length;
        counts.opened += recorded.filter((r) => r.outcome === "opened").length;
        counts.suppressed += recorded.filter((r) => r.outcome === "suppressed").length;
        counts.failed += failedHere;
        // The incident core is not answering: leave the rest to the next sweep.
        if (failedHere === rows.length || rows.length < BATCH) break;
      }
      return counts;
    },

    async deliverResumes(token, onlySilenceId) {
      const counts: ResumeCounts = { resumed: 0, failed: 0 };
      for (;;) {
        const rows = await claimResumes(token, onlySilenceId);
        if (rows.length === 0) break;
        const results = await mapBounded(rows, CONCURRENCY, (row) => deliverResume(token, row));
        const failedHere = results.filter((ok) => !ok).length;
        counts.resumed += results.length - failedHere;
        counts.failed += failedHere;
        if (failedHere === rows.length || rows.length < BATCH) break;
      }
      return counts;
    },

    resumeSoon(silenceId) {
      const work = delivery
        .deliverResumes(randomUUID(), silenceId)
        .catch((err) => logger.warn({ err: String(err), silence: silenceId }, "could not record that a heartbeat resumed; the next sweep retries"))
        .finally(() => background.delete(work));
      background.add(work);
    },

    async settle() {
      await Promise.allSettled([...background]);
    },
  };
  return delivery;
}
