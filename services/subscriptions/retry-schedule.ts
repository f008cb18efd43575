/** No delivery is retried beyond this long after its event (or after a redelivery a person asked for). */
export const RETRY_WINDOW_MS = 24 * 3600 * 1000;

/**
 * The wait before the next try after `failures` failed ones, or undefined when the schedule is
 * spent. Each wait is the schedule's (SUBSCRIPTION_RETRY_SCHEDULE_SECONDS), less up to 20 % at
 * random so that a storm of failures does not come back as one; a receiver's Retry-After, when
 * longer, is honoured.
 */
export function nextRetryDelayMs(
  scheduleSeconds: readonly number[],
  failures: number,
  retryAfterMs: number | undefined,
  random = Math.random,
): number | undefined {
  const base = scheduleSeconds[failures - 1];
  if (base === undefined) return undefined;
  const jittered = base * 1000 * (0.8 + 0.2 * random());
  return Math.max(jittered, retryAfterMs ?? 0);
}

/** A Retry-After header (seconds, or an HTTP date) as milliseconds from `now`, or undefined. */
export function parseRetryAfter(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) return undefined;
  if (/^\s*\d+\s*$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}
