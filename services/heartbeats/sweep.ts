import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { HeartbeatSilentSchema } from "../../gen/warroom/events/v1/events_pb.js";
import type { Sql } from "../runtime/database.js";
import { EVENTS } from "../runtime/events.js";
import type { Logger } from "../runtime/logger.js";
import { sweepDuration, sweepInterval, sweepLastSuccess, sweepsTotal } from "../runtime/metrics.js";
import type { Outbox } from "../runtime/outbox.js";
import { NO_RUN_ID } from "./ping.js";
import type { SilenceDelivery } from "./silence-delivery.js";

const DETECT_BATCH = 1000;
const CLEANUP_EVERY_MS = 3600_000;
const KEEP_FINISHED_SILENCES_DAYS = 30;

export interface SweepResult {
  silent: number;
  opened: number;
  delivered: number;
  suppressed: number;
  resumed: number;
  failed: number;
  detectMilliseconds: number;
  deliverMilliseconds: number;
}

export interface Sweeper {
  /** One sweep now: detect, then deliver what is pending (this sweep's or left by another). */
  sweep(): Promise<SweepResult>;
  /** Sweeps every `intervalSeconds`, the first one at once. */
  start(intervalSeconds: number): void;
  stop(): Promise<void>;
}

interface DetectedRow {
  org_id: string;
  name: string;
  now: Date;
  silent_seconds: number;
}

/**
 * The silence sweep: declares silent the heartbeats past their deadline, then delivers what is
 * pending; run once with `sweep()` or on a timer with `start()`.
 */
export function createSweeper(deps: { sql: Sql; outbox: Outbox; delivery: SilenceDelivery; logger: Logger }): Sweeper {
  const { sql, outbox, delivery, logger } = deps;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<unknown> | undefined;
  let stopped = true;
  let lastCleanup = 0;

  /**
   * Declares silent every heartbeat past its deadline that is not silent already, in one
   * statement per batch: rows are locked with SKIP LOCKED and `open_silence_id` is set in the same
   * statement that creates the silence, so concurrent sweeps split the rows and a silence is
   * detected once. The silence row is committed before anything is delivered; a crash after this
   * point leaves it pending for the next sweep.
   */
  async function detectBatch(): Promise<number> {
    return sql.begin(async (tx) => {
      const rows = await tx<DetectedRow[]>`
        with due as (
          select id, ctid as row_ctid, deadline, coalesce(last_seen_at, created_at) as since, last_seen_at is null as never_pinged
          from heartbeats.heartbeats
          where open_silence_id is null and deadline < now()
          order by deadline
          limit ${DETECT_BATCH}
          for update skip locked
        ), opened as (
          insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged)
          select id, deadline, since, never_pinged from due
          returning id, heartbeat_id, since
        )
        -- The rows are locked, so their ctids hold: a TID scan, where a join on id would read the
        -- whole table into a hash (100,000 rows for 1,000 due).
        update heartbeats.heartbeats h set open_silence_id = opened.id
        from opened where h.ctid = any(array(select row_ctid from due)) and h.id = opened.heartbeat_id
        returning h.org_id, h.name, now() as now, extract(epoch from now() - opened.since)::float8 as silent_seconds`;
      // One statement for the whole batch: a thousand silences cost one round trip, not a thousand.
      await outbox.writeMany(
        tx,
        EVENTS.heartbeatSilent,
        rows.map((row) =>
          create(HeartbeatSilentSchema, {
            orgId: row.org_id,
            name: row.name,
            silentSeconds: BigInt(Math.floor(row.silent_seconds)),
            at: timestampFromDate(row.now),
          }),
        ),
      );
      return rows.length;
    });
  }

  /**
   * Declares "ran too long" every run that started and has not ended by its limit, in one
   * statement per batch, like detectBatch: the run is marked with its silence in the same
   * statement, so it is declared once. The silence becomes the heartbeat's open one unless one is
   * open already; either way its alert is delivered (a second one attaches to the open incident).
   */
  async function detectOverrunBatch(): Promise<number> {
    const [row] = await sql<{ n: number }[]>`
      with due as (
        select heartbeat_id, run_key, started_at, overrun_at from heartbeats.runs
        where overrun_silence_id is null and overrun_at < now()
        order by overrun_at
        limit ${DETECT_BATCH}
        for update skip locked
      ), opened as (
        insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged, cause, run_id)
        select heartbeat_id, overrun_at, started_at, false, 'overrun', nullif(run_key, ${NO_RUN_ID}::uuid) from due
        returning id, heartbeat_id, coalesce(run_id, ${NO_RUN_ID}::uuid) as run_key
      ), marked as (
        update heartbeats.runs r set overrun_silence_id = opened.id
        from opened where r.heartbeat_id = opened.heartbeat_id and r.run_key = opened.run_key
      ), pointed as (
        update heartbeats.heartbeats h set open_silence_id = opened.id
        from opened where h.id = any(array(select heartbeat_id from opened)) and h.id = opened.heartbeat_id and h.open_silence_id is null
      )
      select count(*)::int as n from opened`;
    return row!.n;
  }

  async function cleanup(): Promise<void> {
    if (Date.now() - lastCleanup < CLEANUP_EVERY_MS) return;
    lastCleanup = Date.now();
    // Finished silences, and alerts delivered alongside an open one that no ping will end.
    await sql`
      delete from heartbeats.silences s
      where s.resume_recorded_at < now() - make_interval(days => ${KEEP_FINISHED_SILENCES_DAYS})
        or (s.ended_at is null and s.alert_recorded_at < now() - make_interval(days => ${KEEP_FINISHED_SILENCES_DAYS})
            and s.suppressed_until is null
            and not exists (select 1 from heartbeats.heartbeats h where h.open_silence_id = s.id))`;
    // A start never followed by an end: kept past the longest allowed run, then forgotten.
    await sql`delete from heartbeats.runs where started_at < now() - make_interval(days => ${KEEP_FINISHED_SILENCES_DAYS})`;
  }

  /** One sweep, counted: ok, partial (some silences wait for the next sweep) or failed. */
  async function sweep(): Promise<SweepResult> {
    const started = performance.now();
    let result: SweepResult;
    try {
      result = await sweepOnce();
    } catch (err) {
      sweepsTotal.inc({ result: "failed" });
      throw err;
    }
    sweepDuration.observe((performance.now() - started) / 1000);
    sweepsTotal.inc({ result: result.failed > 0 ? "partial" : "ok" });
    sweepLastSuccess.set(Date.now() / 1000);
    return result;
  }

  async function sweepOnce(): Promise<SweepResult> {
    const started = performance.now();
    let silent = 0;
    for (;;) {
      const n = await detectBatch();
      silent += n;
      if (n < DETECT_BATCH) break;
    }
    for (;;) {
      const n = await detectOverrunBatch();
      silent += n;
      if (n < DETECT_BATCH) break;
    }
    if (silent > 0) outbox.poke();
    // One token for this sweep: rows it failed to deliver keep it, so this sweep does not loop
    // on them; the next sweep retries them.
    const token = randomUUID();
    const detected = performance.now();
    const alerts = await delivery.deliverAlerts(token);
    const resumes = await delivery.deliverResumes(token);
    const delivered = performance.now();
    await cleanup();
    const result = {
      silent,
      opened: alerts.opened,
      delivered: alerts.delivered,
      suppressed: alerts.suppressed,
      resumed: resumes.resumed,
      failed: alerts.failed + resumes.failed,
      detectMilliseconds: Math.round(detected - started),
      deliverMilliseconds: Math.round(delivered - detected),
    };
    if (silent > 0 || result.delivered > 0 || result.resumed > 0 || result.failed > 0) logger.info(result, "heartbeat sweep");
    return result;
  }

  function schedule(intervalSeconds: number, delayMs: number): void {
    if (stopped) return;
    timer = setTimeout(() => {
      const started = Date.now();
      const run = sweep()
        .catch((err) => logger.warn({ err: String(err) }, "heartbeat sweep failed; the next one retries"))
        .finally(() => {
          current = undefined;
          schedule(intervalSeconds, Math.max(0, intervalSeconds * 1000 - (Date.now() - started)));
        });
      current = run;
    }, delayMs);
    timer.unref();
  }

  return {
    sweep,
    start(intervalSeconds) {
      stopped = false;
      sweepInterval.set(intervalSeconds);
      schedule(intervalSeconds, 0);
    },
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await current;
    },
  };
}
