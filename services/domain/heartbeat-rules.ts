import { InvalidArgumentError } from "../runtime/errors.js";

/**
 * What a heartbeat may look like. The name is a path segment and appears in incident titles, so
 * it is a lowercase URL-safe slug: no escaping anywhere, and "Backup" and "backup" cannot both
 * exist.
 */
export const NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,62}$/;
export const MAX_INTERVAL_SECONDS = 31 * 86_400;
export const MAX_GRACE_SECONDS = 7 * 86_400;

export const NAME_RULE = "name must be 1-63 characters of lowercase letters, digits, '.', '_' or '-', starting with a letter or digit";

/** Refuses an empty name or one outside the name rule (InvalidArgument). */
export function checkName(name: string): void {
  if (!name) throw new InvalidArgumentError("name is required");
  if (!NAME_PATTERN.test(name)) throw new InvalidArgumentError(NAME_RULE);
}

/** The expected interval in whole seconds, from 1 to 31 days; anything else is InvalidArgument. */
export function checkInterval(value: number | undefined): number {
  return checkSeconds("expectedIntervalSeconds", value, MAX_INTERVAL_SECONDS, "31 days");
}

/**
 * Grace is at least 1 second. A zero cannot be told from a missing field in the request (proto3
 * has no presence for it), and the spec makes grace required; 1 second behaves as no grace,
 * since a silence is caught by the first sweep after the deadline anyway.
 */
export function checkGrace(value: number | undefined): number {
  return checkSeconds("graceSeconds", value, MAX_GRACE_SECONDS, "7 days");
}

export const MAX_RUN_SECONDS = 7 * 86_400;

/** The run limit in whole seconds, from 1 to 7 days; anything else is InvalidArgument. */
export function checkMaxRun(value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > MAX_RUN_SECONDS) {
    throw new InvalidArgumentError(`maxRunSeconds must be a whole number of seconds from 1 to ${MAX_RUN_SECONDS} (7 days)`);
  }
  return value;
}

/** The shortest run in whole seconds, from 1 to 7 days; anything else is InvalidArgument. */
export function checkMinRun(value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > MAX_RUN_SECONDS) {
    throw new InvalidArgumentError(`minRunSeconds must be a whole number of seconds from 1 to ${MAX_RUN_SECONDS} (7 days)`);
  }
  return value;
}

export const MAX_MISSES = 100;

/**
 * How many expected pings in a row may be missed before a silence is declared: 1 (the first
 * miss) to 100; anything else is InvalidArgument.
 */
export function checkMisses(value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > MAX_MISSES) {
    throw new InvalidArgumentError(`alertAfterMisses must be a whole number from 1 (alert on the first missed ping) to ${MAX_MISSES}; leave it out for 1`);
  }
  return value;
}

/** A run cannot have to last longer than it may. */
export function checkRunLimits(minRun: number | null, maxRun: number | null): void {
  if (minRun !== null && maxRun !== null && minRun >= maxRun) {
    throw new InvalidArgumentError(`minRunSeconds (${minRun}) must be less than maxRunSeconds (${maxRun})`);
  }
}

function checkSeconds(field: string, value: number | undefined, max: number, maxInWords: string): number {
  if (value === undefined || value === 0) {
    throw new InvalidArgumentError(
      `${field} is required: a positive whole number of seconds${field === "graceSeconds" ? " (1 is the smallest, and behaves as none)" : ""}`,
    );
  }
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new InvalidArgumentError(`${field} must be a whole number of seconds from 1 to ${max} (${maxInWords})`);
  }
  return value;
}

/** "3d 4h", "12m 5s", "45s": the two largest units, for incident titles. */
export function formatDuration(totalSeconds: number): string {
  const seconds = Math.max(0, Math.floor(totalSeconds));
  const units: [string, number][] = [
    ["d", 86_400],
    ["h", 3_600],
    ["m", 60],
    ["s", 1],
  ];
  const parts: string[] = [];
  let rest = seconds;
  for (const [label, size] of units) {
    const n = Math.floor(rest / size);
    rest -= n * size;
    if (n > 0 || (parts.length > 0 && parts.length < 2)) parts.push(`${n}${label}`);
    if (parts.length === 2) break;
  }
  if (parts.length === 0) return "0s";
  // "1h 0m" reads worse than "1h".
  return parts.filter((p, i) => i === 0 || !p.startsWith("0")).join(" ");
}
