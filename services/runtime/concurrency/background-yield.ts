import { performance } from "node:perf_hooks";

/**
 * When background work (investigations, event-subscription deliveries) gives way to the work a
 * sender waits for (deliveries, pings): the process's event loop was more than BUSY_LOOP busy over
 * the last sample, and foreground work ran in it. Background work that keeps the loop busy by
 * itself (a backlog draining after a storm) runs at full speed: slowing it would help nobody.
 * One process has one event loop, so this is per process, not per service.
 */
const BUSY_LOOP = 0.8;
/** The loop's utilization is judged over at least this long. */
const SAMPLE_MS = 1000;

/** What the judgement reads: a clock in milliseconds, and the loop's busy time so far. */
export interface LoopReadings {
  now(): number;
  /** The event loop's active and idle time since the process began, in milliseconds. */
  loopTime(): { active: number; idle: number };
}

const processLoop: LoopReadings = {
  now: () => performance.now(),
  loopTime: () => performance.eventLoopUtilization(),
};

/** A judge of one event loop; the process's own is below. */
export function backgroundYield(loop: LoopReadings = processLoop) {
  let sampledAt = loop.now();
  let sampled = loop.loopTime();
  let foreground = 0;
  let yielding = false;
  return {
    /** Foreground work ran: one delivery or ping. Costs an increment. */
    noteForegroundWork(): void {
      foreground++;
    },
    /** Whether background work should take its smaller share now (sampled at most once a second). */
    shouldYield(): boolean {
      const now = loop.now();
      if (now - sampledAt >= SAMPLE_MS) {
        const current = loop.loopTime();
        const active = current.active - sampled.active;
        const total = active + current.idle - sampled.idle;
        yielding = foreground > 0 && total > 0 && active / total > BUSY_LOOP;
        sampled = current;
        sampledAt = now;
        foreground = 0;
      }
      return yielding;
    },
  };
}

const thisProcess = backgroundYield();

/** Foreground work ran in this process: one delivery or ping. */
export const noteForegroundWork = (): void => thisProcess.noteForegroundWork();

/** Whether this process's background work should take its smaller share now. */
export const backgroundShouldYield = (): boolean => thisProcess.shouldYield();
