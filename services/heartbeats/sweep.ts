import { randomUUID } from "node:crypto";
import { createSweepLoop } from "../runtime/concurrency/sweep-loop.js";
import type { Logger } from "../runtime/observability/logger.js";
import { sweepDuration, sweepInterval, sweepLastSuccess, sweepsTotal } from "../runtime/observability/metrics.js";
import type { Outbox } from "../runtime/data/outbox.js";
import type { SilenceDelivery } from "./silence-delivery.js";
import type { HeartbeatStore } from "./store.js";

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

/**
 * The silence sweep: declares silent every heartbeat past its deadline and every run past its
 * limit, a batch at a time, then delivers what is pending; run once with `sweep()` or on a timer
 * with `start()`. A silence is committed before anything is delivered: a crash in between leaves
 * it pending for the next sweep.
 */
export function createSweeper(deps: { store: HeartbeatStore; outbox: Pick<Outbox, "poke">; delivery: SilenceDelivery; logger: Logger }): Sweeper {
  const { store, outbox, delivery, logger } = deps;
  // Every result at 0 from the start: the alert rules' increase() sees the first of each.
  for (const result of ["ok", "partial", "failed"]) sweepsTotal.inc({ result }, 0);
  let lastCleanup = 0;

  async function cleanup(): Promise<void> {
    if (Date.now() - lastCleanup < CLEANUP_EVERY_MS) return;
    lastCleanup = Date.now();
    await store.cleanup(KEEP_FINISHED_SILENCES_DAYS);
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

  const loop = createSweepLoop(sweep, (err) => logger.warn({ err: String(err) }, "heartbeat sweep failed; the next one retries"));

  async function sweepOnce(): Promise<SweepResult> {
    const started = performance.now();
    let silent = 0;
    for (;;) {
      const n = await store.detectSilences(DETECT_BATCH);
      silent += n;
      if (n < DETECT_BATCH) break;
    }
    for (;;) {
      const n = await store.detectOverruns(DETECT_BATCH);
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

  return {
    sweep,
    start(intervalSeconds) {
      sweepInterval.set(intervalSeconds);
      loop.start(intervalSeconds);
    },
    stop: () => loop.stop(),
  };
}
