import type { LogEntry, RawSeries } from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";

/**
 * Rule 7 of the protocol: series and entries, when returned, are sorted ascending by time, times
 * are ISO 8601 and values are finite numbers. The client and the conformance check validate with
 * these functions; the hosting kit normalizes with them.
 */

const ISO_8601 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})$/;

/** An ISO 8601 date-time with a zone, e.g. 2024-05-01T12:00:00Z or 2024-05-01T14:00:00.123+02:00. */
export function isIsoTime(value: string): boolean {
  return timeKey(value) !== undefined;
}

/**
 * Nanoseconds since the epoch, for ordering (log lines often share a millisecond), or undefined
 * when the value is not an ISO 8601 date-time.
 */
export function timeKey(value: string): bigint | undefined {
  const match = ISO_8601.exec(value);
  if (!match) return undefined;
  const fraction = match[7] ?? "";
  const millis = Date.parse(value.replace(/\.\d+/, `.${(`${fraction}000`).slice(0, 3)}`));
  if (!Number.isFinite(millis)) return undefined;
  const belowMillis = BigInt(`${fraction.slice(3)}000000`.slice(0, 6));
  return BigInt(millis) * 1_000_000n + belowMillis;
}

/** What is wrong with a series list, or undefined when it keeps rule 7. */
export function seriesProblem(series: readonly RawSeries[]): string | undefined {
  for (const [index, s] of series.entries()) {
    const name = s.label ? `series "${s.label}"` : `series ${index}`;
    let previous: bigint | undefined;
    for (const [i, point] of s.points.entries()) {
      const key = timeKey(point.t);
      if (key === undefined) return `${name}: point ${i} has time ${JSON.stringify(point.t)}, not ISO 8601`;
      // NaN also stands for a value that was not a JSON number at all (a string such as "42").
      if (!Number.isFinite(point.v))
        return `${name}: point ${i} has value ${Number.isNaN(point.v) ? "NaN or not a JSON number" : point.v}, not a finite number`;
      if (previous !== undefined && key < previous) return `${name}: points are not sorted ascending by time (point ${i} is earlier than point ${i - 1})`;
      previous = key;
    }
  }
  return undefined;
}

/** What is wrong with a log entry list, or undefined when it keeps rule 7. */
export function entriesProblem(entries: readonly LogEntry[]): string | undefined {
  let previous: bigint | undefined;
  for (const [i, entry] of entries.entries()) {
    const key = timeKey(entry.t);
    if (key === undefined) return `entry ${i} has time ${JSON.stringify(entry.t)}, not ISO 8601`;
    if (previous !== undefined && key < previous) return `entries are not sorted ascending by time (entry ${i} is earlier than entry ${i - 1})`;
    previous = key;
  }
  return undefined;
}

/** A time as a source may hold it: ISO text, epoch milliseconds or a Date. */
export type TimeInput = string | number | Date;

/** The ISO 8601 form of a time; throws on a value that is not one. */
export function toIsoTime(value: TimeInput): string {
  if (typeof value === "string") {
    if (isIsoTime(value)) return value;
    throw new RangeError(`time ${JSON.stringify(value)} is not ISO 8601`);
  }
  const date = typeof value === "number" ? new Date(value) : value;
  if (!Number.isFinite(date.getTime())) throw new RangeError(`time ${String(value)} is not a valid time`);
  return date.toISOString();
}

/** Sorts by time without reordering equal times. */
export function sortByTime<T extends { t: string }>(items: readonly T[]): T[] {
  return items
    .map((item, index) => ({ item, index, key: timeKey(item.t) ?? 0n }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.index - b.index))
    .map((entry) => entry.item);
}
