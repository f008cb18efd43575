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

let sampledAt = performance.now();
let sampled = performance.eventLoopUtilization();
let foreground = 0;
let yielding = false;

/** Foreground work ran: one delivery or ping. Costs an increment. */
export function noteForegroundWork(): void {
  foreground++;
}

/** Whether background work should take its smaller share now (sampled at most once a second). */
export function backgroundShouldYield(): boolean {
  const now = performance.now();
  if (now - sampledAt >= SAMPLE_MS) {
    const current = performance.eventLoopUtilization();
    yielding = foreground > 0 && performance.eventLoopUtilization(current, sampled).utilization > BUSY_LOOP;
    sampled = current;
    sampledAt = now;
    foreground = 0;
  }
  return yielding;
}
