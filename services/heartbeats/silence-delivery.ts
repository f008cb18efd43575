import { randomUUID } from "node:crypto";
import { create, toBinary, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { RecordRequestSchema, type RecordResponse } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { Logger } from "../runtime/observability/logger.js";
import { mapBounded } from "../runtime/concurrency/map-bounded.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { formatDuration } from "../domain/heartbeat-rules.js";
import { describeBody } from "./ping/ping-body.js";
import type { ClaimedAlert, ClaimedResume, HeartbeatStore, RecordedAlert } from "./store.js";
import { cadenceData } from "./heartbeat-shape.js";

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
const BATCH = 1000;
/**
 * A sweep of many silences hands two batches to the incident core at once: 10,000 silences took
 * 20 % less time in the benchmark. Each batch holds a background connection only while it is
 * claimed or marked, so two leave the outbox relays room.
 */
const BATCHES_IN_FLIGHT = 2;
const CONCURRENCY = 16;
/**
 * A silence whose alert a maintenance window suppressed is offered again when the window ends, and
 * checked at least this often meanwhile (a window deleted early ends it sooner). A check asks the
 * incident core when the window ends, which writes nothing: one `trigger.suppressed` audit row per
 * window, however long it lasts.
 */
export const SUPPRESSED_RECHECK_SECONDS = 300;
/** The most one RecordMany call carries (encoded), well inside a bus message (1 MiB). */
const RECORD_MANY_BYTES = 768 * 1024;
/** And at most this many deliveries, the incident core's limit per call. */
const RECORD_MANY_DELIVERIES = 1000;

export const SOURCE_BADGE = "heartbeat";
/** The attach identity of a heartbeat's alerts: one open incident per heartbeat. */
export const attachIdentity = (name: string) => `heartbeat:${name}`;
/** The event id of one silence's alert, so it is recorded once however often it is delivered. */
export const silenceEventId = (silenceId: string) => `heartbeat-silence:${silenceId}`;
/** The event id of the `resumed` entry that ends one silence. */
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

export interface SilenceDelivery {
  /** Delivers every alert not yet recorded whose lease is free (all of them, or the one given). */
  deliverAlerts(token: string, onlySilenceId?: string): Promise<AlertCounts>;
  /** Delivers the alert of one silence (a failure a ping reported) in the background. */
  alertSoon(silenceId: string): void;
  /** Keeps background work of the service in the set `settle` waits for. */
  track(work: Promise<unknown>): void;
  /** Delivers `resumed` for silences ended by a ping (all of them, or the one given). */
  deliverResumes(token: string, onlySilenceId?: string): Promise<ResumeCounts>;
  /** Delivers the `resumed` of one silence in the background, right after the ping that ended it. */
  resumeSoon(silenceId: string): void;
  /** Waits for background deliveries (shutdown). */
  settle(): Promise<void>;
}

/**
 * Hands silences to the incident core: each one's alert, and the `resumed` a ping ends it with,
 * exactly once, under a lease so replicas never deliver the same one together.
 */
export function createSilenceDelivery(deps: { store: HeartbeatStore; clients: Clients; logger: Logger }): SilenceDelivery {
  const { store, clients, logger } = deps;
  const background = new Set<Promise<unknown>>();

  /**
   * Words for what the heartbeat expects: "one every 5m with 1m of grace", and ", alerting after 3
   * missed in a row" when more than the first miss is allowed.
   */
  function expectation(row: {
    expected_interval_seconds: number | null;
    schedule: string | null;
    timezone: string | null;
    grace_seconds: number;
    alert_after_misses: number;
  }): string {
    const grace = formatDuration(row.grace_seconds);
    const misses = row.alert_after_misses > 1 ? `, alerting after ${row.alert_after_misses} missed in a row` : "";
    return row.schedule
      ? `one on the schedule "${row.schedule}" (${row.timezone ?? "UTC"}) with ${grace} of grace${misses}`
      : `one every ${formatDuration(row.expected_interval_seconds ?? 0)} with ${grace} of grace${misses}`;
  }

  function alertOf(row: ClaimedAlert): { title: string; summary: string; data: JsonObject } {
    const data: JsonObject = {
      heartbeat: row.name,
      cause: row.cause,
      graceSeconds: row.grace_seconds,
      deadline: row.deadline.toISOString(),
      ...cadenceData(row),
    };
    if (row.suppressed_by) data.suppressedByMaintenanceWindow = row.suppressed_by;
    if (row.alert_after_misses > 1) data.alertAfterMisses = row.alert_after_misses;
    const heldNote = row.suppressed_by
      ? ` It went silent while a maintenance window (${row.suppressed_by}) covered it; the alert was held until the window ended and it was still silent.`
      : "";
    const said = describeBody({ text: row.body ?? "", cut: row.body_cut ?? false, bytes: row.body_bytes ?? 0 });
    if (row.cause === "fail") {
      const status = row.exit_status === null ? "" : ` with exit status ${row.exit_status}`;
      data.exitStatus = row.exit_status;
      data.runId = row.run_id;
      return {
        title: `Heartbeat ${row.name} failed${status}`,
        summary: `${row.name} reported a failure${status} at ${row.deadline.toISOString()}${row.run_id ? ` (run ${row.run_id})` : ""}.${heldNote}${said ? `\n\n${said}` : ""}`,
        data,
      };
    }
    if (row.cause === "quick") {
      data.runId = row.run_id;
      data.runSeconds = row.last_run_seconds;
      data.minRunSeconds = row.min_run_seconds;
      return {
        title: `Heartbeat ${row.name} finished too quickly`,
        summary: `A run of ${row.name}${row.run_id ? ` (run ${row.run_id})` : ""} reported success at ${row.deadline.toISOString()} after running ${formatDuration(row.last_run_seconds ?? 0)}; runs take at least ${formatDuration(row.min_run_seconds ?? 0)}.${heldNote}${said ? `\n\n${said}` : ""}`,
        data,
      };
    }
    if (row.cause === "overrun") {
      data.runId = row.run_id;
      data.startedAt = row.since.toISOString();
      data.maxRunSeconds = row.max_run_seconds;
      return {
        title: `Heartbeat ${row.name} ran too long`,
        summary: `A run of ${row.name}${row.run_id ? ` (run ${row.run_id})` : ""} started at ${row.since.toISOString()} and has not ended ${formatDuration(row.silent_seconds)} later; runs may take ${formatDuration(row.max_run_seconds ?? 0)}.${heldNote}`,
        data,
      };
    }
    const silentFor = formatDuration(row.silent_seconds);
    data.lastSeenAt = row.never_pinged ? null : row.since.toISOString();
    data.silentSeconds = Math.floor(row.silent_seconds);
    const parts = [
      row.never_pinged
        ? `No ping from ${row.name} since it was registered at ${row.since.toISOString()} (${silentFor} ago); it expects ${expectation(row)}.`
        : `Last ping from ${row.name} at ${row.since.toISOString()}, ${silentFor} ago; it expects ${expectation(row)}.`,
    ];
    if (row.during) {
      // The incident this attaches to is the failure's (or the overrun's): say what changed.
      data.during = row.during;
      parts.push(
        row.during === "fail"
          ? "It has stopped pinging since it reported the failure."
          : row.during === "quick"
            ? "It has stopped pinging since the run that finished too quickly."
            : "It has stopped pinging since the run that ran too long.",
      );
    }
    if (row.last_kind && row.last_ping_at) {
      const lastRun: JsonObject = { kind: row.last_kind, at: row.last_ping_at.toISOString() };
      const status = row.exit_status === null ? "" : ` with exit status ${row.exit_status}`;
      if (row.exit_status !== null) lastRun.exitStatus = row.exit_status;
      if (row.last_run_seconds !== null) lastRun.runSeconds = row.last_run_seconds;
      data.lastRun = lastRun;
      parts.push(
        `Its last run ${row.last_kind === "fail" ? "failed" : "succeeded"}${status} at ${row.last_ping_at.toISOString()}${row.last_run_seconds === null ? "" : `, after running ${formatDuration(row.last_run_seconds)}`}.`,
      );
    }
    if (row.unfinished_start) {
      data.unfinishedStartAt = row.unfinished_start.toISOString();
      parts.push(`A run started at ${row.unfinished_start.toISOString()} and has not finished.`);
    }
    const lastSaid = row.last_kind ? describeBody({ text: row.body ?? "", cut: row.body_cut ?? false, bytes: row.body_bytes ?? 0 }) : "";
    const summary = `${parts.join(" ")}${heldNote}${lastSaid ? `\n\nWhat the last run said:\n${lastSaid}` : ""}`;
    // The title names no duration: it would freeze at the moment of delivery. The time silent is
    // on the entry (`silentSeconds`, counted from the last ping) and the console counts it live.
    return { title: `Heartbeat ${row.name} went silent`, summary, data };
  }

  /** When a suppressed alert is offered again: when its window ends, and at least every recheck. */
  async function suppressedUntil(orgId: string, windowId: string): Promise<{ until: Date; active: boolean }> {
    const answer = await clients.incidents.getMaintenanceWindowEnd({ orgId, id: windowId }, { timeoutMs: RECORD_TIMEOUT_MS });
    const now = answer.now ? timestampDate(answer.now) : new Date();
    const recheck = new Date(now.getTime() + SUPPRESSED_RECHECK_SECONDS * 1000);
    const ends = answer.endsAt ? timestampDate(answer.endsAt) : undefined;
    if (!ends || ends.getTime() <= now.getTime()) return { until: now, active: false };
    return { until: ends.getTime() < recheck.getTime() ? ends : recheck, active: true };
  }

  function requestOf(row: ClaimedAlert): MessageInitShape<typeof RecordRequestSchema> {
    const { title, summary, data } = alertOf(row);
    return {
      orgId: row.org_id,
      orgSlug: row.org_slug,
      alert: {
        source: SOURCE_BADGE,
        attachIdentity: attachIdentity(row.name),
        eventId: silenceEventId(row.id),
        kind: "alert",
        title,
        severity: "sev2",
        entity: { kind: "heartbeat", id: row.name },
        summary,
        occurredAt: timestampFromDate(row.deadline),
        data,
      },
    };
  }

  async function interpret(row: ClaimedAlert, response: RecordResponse): Promise<RecordedAlert> {
    if (response.outcome === "suppressed" && response.maintenanceWindowId) {
      const window = await suppressedUntil(row.org_id, response.maintenanceWindowId);
      return { id: row.id, outcome: response.outcome, incidentId: "", suppressedUntil: window.until, suppressedBy: response.maintenanceWindowId };
    }
    return { id: row.id, outcome: response.outcome, incidentId: response.incident?.id ?? "", suppressedUntil: null, suppressedBy: null };
  }

  /**
   * Hands a claimed batch to the incident core: RecordMany calls of at most 768 KiB encoded and
   * 1,000 deliveries each (so a call fits in one bus message), which open the batch's new incidents in one
   * statement. A call that fails releases its silences at once; the next sweep retries them under
   * the same event ids.
   */
  async function recordAlerts(token: string, rows: ClaimedAlert[]): Promise<(RecordedAlert | undefined)[]> {
    const results: (RecordedAlert | undefined)[] = new Array(rows.length);
    const pending: number[] = [];
    for (let k = 0; k < rows.length; k++) {
      const row = rows[k]!;
      // A window that suppressed this alert and still runs: wait for it without asking Record
      // (which would suppress and audit it again).
      if (!row.suppressed_by) {
        pending.push(k);
        continue;
      }
      try {
        const window = await suppressedUntil(row.org_id, row.suppressed_by);
        if (window.active) results[k] = { id: row.id, outcome: "suppressed", incidentId: "", suppressedUntil: window.until, suppressedBy: row.suppressed_by };
        else pending.push(k);
      } catch (err) {
        await release(token, [row.id]);
        logger.warn({ err: String(err), heartbeat: row.name, silence: row.id }, "could not ask when a maintenance window ends; the next sweep retries");
      }
    }
    const requests = new Map(pending.map((k) => [k, create(RecordRequestSchema, requestOf(rows[k]!))]));
    // Sized by the encoded request, plus room for the repeated field's tag and length.
    for (const chunk of chunksBySize(pending, (k) => toBinary(RecordRequestSchema, requests.get(k)!).byteLength + 8)) {
      const chunkRows = chunk.map((k) => rows[k]!);
      try {
        const response = await clients.incidents.recordMany({ deliveries: chunk.map((k) => requests.get(k)!) }, { timeoutMs: RECORD_TIMEOUT_MS });
        const refused: string[] = [];
        for (let j = 0; j < chunk.length; j++) {
          const error = response.errors[j];
          if (error !== undefined) {
            refused.push(chunkRows[j]!.id);
            logger.warn(
              { err: error, heartbeat: chunkRows[j]!.name, silence: chunkRows[j]!.id },
              "the incident core refused a silence; the next sweep retries",
            );
            continue;
          }
          results[chunk[j]!] = await interpret(chunkRows[j]!, response.results[j]!);
        }
        await release(token, refused);
      } catch (err) {
        await release(
          token,
          chunkRows.filter((_, j) => results[chunk[j]!] === undefined).map((r) => r.id),
        );
        logger.warn({ err: String(err), silences: chunkRows.length }, "could not hand silences to the incident core; the next sweep retries");
      }
    }
    return results;
  }

  async function deliverResume(token: string, row: ClaimedResume): Promise<boolean> {
    const silentFor = formatDuration(row.silent_seconds);
    const said = describeBody({ text: row.ended_body ?? "", cut: row.ended_body_cut ?? false, bytes: row.ended_body_bytes ?? 0 });
    const ranFor = row.ended_run_seconds === null ? "" : ` The run took ${formatDuration(row.ended_run_seconds)}.`;
    const data: JsonObject = { heartbeat: row.name, cause: row.cause, resumedAt: row.ended_at.toISOString(), silentSeconds: Math.floor(row.silent_seconds) };
    if (row.ended_run_seconds !== null) data.runSeconds = row.ended_run_seconds;
    const [title, summary] =
      row.cause === "silence"
        ? [
            `Heartbeat ${row.name} resumed after ${silentFor} of silence`,
            `Ping received from ${row.name} at ${row.ended_at.toISOString()} after ${silentFor} of silence.`,
          ]
        : [
            `Heartbeat ${row.name} succeeded again`,
            `${row.name} reported success at ${row.ended_at.toISOString()}, ${silentFor} after it ${row.cause === "fail" ? "failed" : row.cause === "quick" ? "finished a run too quickly" : "started the run that ran too long"}.`,
          ];
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
            title,
            severity: "sev2",
            entity: { kind: "heartbeat", id: row.name },
            summary: `${summary}${ranFor}${said ? `\n\n${said}` : ""}`,
            occurredAt: timestampFromDate(row.ended_at),
            data,
          },
        },
        { timeoutMs: RECORD_TIMEOUT_MS },
      );
      await store.markResumeRecorded(token, row.id, response.outcome);
      return true;
    } catch (err) {
      await release(token, [row.id]);
      logger.warn({ err: String(err), heartbeat: row.name, silence: row.id }, "could not record that a heartbeat resumed; the next sweep retries");
      return false;
    }
  }

  function release(token: string, silenceIds: string[]): Promise<void> {
    return store.release(token, silenceIds);
  }

  const delivery: SilenceDelivery = {
    async deliverAlerts(token, onlySilenceId) {
      const counts: AlertCounts = { delivered: 0, opened: 0, suppressed: 0, failed: 0 };
      // Two batches at a time: while one is with the incident core, the other is claimed or marked
      // (each claim takes only unclaimed rows, as a second replica's would).
      const worker = async () => {
        for (;;) {
          const rows = await store.claimAlerts({ token, onlySilenceId, limit: BATCH, leaseSeconds: LEASE_SECONDS });
          if (rows.length === 0) break;
          const results = await recordAlerts(token, rows);
          const recorded = results.filter((r): r is RecordedAlert => r !== undefined);
          await store.markAlertsRecorded(token, recorded);
          const failedHere = rows.length - recorded.length;
          counts.delivered += recorded.length;
          counts.opened += recorded.filter((r) => r.outcome === "opened").length;
          counts.suppressed += recorded.filter((r) => r.outcome === "suppressed").length;
          counts.failed += failedHere;
          // The incident core is not answering: leave the rest to the next sweep.
          if (failedHere === rows.length || rows.length < BATCH) break;
        }
      };
      // One silence (a failure a ping reported) needs one claim, not a second that finds nothing.
      await Promise.all(Array.from({ length: onlySilenceId ? 1 : BATCHES_IN_FLIGHT }, worker));
      return counts;
    },

    alertSoon(silenceId) {
      delivery.track(
        delivery
          .deliverAlerts(randomUUID(), silenceId)
          .catch((err) => logger.warn({ err: String(err), silence: silenceId }, "could not hand a failure to the incident core; the next sweep retries")),
      );
    },

    track(work) {
      const tracked = work.finally(() => background.delete(tracked));
      background.add(tracked);
    },

    async deliverResumes(token, onlySilenceId) {
      const counts: ResumeCounts = { resumed: 0, failed: 0 };
      for (;;) {
        const rows = await store.claimResumes({ token, onlySilenceId, limit: BATCH, leaseSeconds: LEASE_SECONDS });
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
      delivery.track(
        delivery
          .deliverResumes(randomUUID(), silenceId)
          .catch((err) => logger.warn({ err: String(err), silence: silenceId }, "could not record that a heartbeat resumed; the next sweep retries")),
      );
    },

    async settle() {
      await Promise.allSettled([...background]);
    },
  };
  return delivery;
}

/** Groups indexes into runs of at most RECORD_MANY_DELIVERIES whose sizes add up to at most RECORD_MANY_BYTES. */
function chunksBySize(items: number[], sizeOf: (k: number) => number): number[][] {
  const chunks: number[][] = [];
  let current: number[] = [];
  let size = 0;
  for (const k of items) {
    const s = sizeOf(k);
    if (current.length > 0 && (size + s > RECORD_MANY_BYTES || current.length >= RECORD_MANY_DELIVERIES)) {
      chunks.push(current);
      current = [];
      size = 0;
    }
    current.push(k);
    size += s;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}
