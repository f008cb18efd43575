import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";

// google.protobuf.Timestamp only covers years 1 to 9999; anything outside would fail when the
// alert is serialized, so such values are treated as absent here instead.
const MIN_SECONDS = -62_135_596_800;
const MAX_SECONDS = 253_402_300_799;

const STRICT_RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$/;

// Senders stretch the format: CloudWatch writes `+0000`, Azure seven fraction digits, some
// templates a space instead of `T` or no offset at all (read as UTC).
const LENIENT_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:?\d{2})?$/;

/** RFC 3339 exactly, as the remote-source protocol requires. */
export function parseRfc3339(value: string): Timestamp | undefined {
  const match = STRICT_RFC3339.exec(value);
  return match ? fromDateTimeMatch(match) : undefined;
}

/** Any of the date-time spellings real senders use; anything else is absent. */
export function parseDateTime(value: unknown): Timestamp | undefined {
  if (typeof value !== "string" || value.length > 64) return undefined;
  const match = LENIENT_DATE_TIME.exec(value.trim());
  return match ? fromDateTimeMatch(match) : undefined;
}

/**
 * A Timestamp from Unix seconds (fractions to the microsecond); undefined when not finite or
 * outside years 1 to 9999.
 */
export function timestampFromEpochSeconds(value: number): Timestamp | undefined {
  if (!Number.isFinite(value)) return undefined;
  let seconds = Math.floor(value);
  // A double near today's epoch carries about microsecond precision; finer digits are noise.
  let nanos = Math.round((value - seconds) * 1e6) * 1000;
  if (nanos >= 1e9) {
    seconds += 1;
    nanos -= 1e9;
  }
  return fromParts(seconds, nanos);
}

/** A Timestamp from Unix milliseconds; undefined when not finite or outside years 1 to 9999. */
export function timestampFromEpochMilliseconds(value: number): Timestamp | undefined {
  return Number.isFinite(value) ? timestampFromEpochSeconds(value / 1000) : undefined;
}

/** A Timestamp from a Date; undefined for an invalid date or one outside years 1 to 9999. */
export function timestampFromDate(date: Date): Timestamp | undefined {
  const ms = date.getTime();
  return Number.isNaN(ms) ? undefined : timestampFromEpochMilliseconds(ms);
}

/** A canonical spelling, so two spellings of one instant give the same event identifier. */
export function canonicalInstant(timestamp: Timestamp): string {
  return `${timestamp.seconds}.${String(timestamp.nanos).padStart(9, "0")}`;
}

/** A Timestamp as Unix milliseconds. */
export function timestampToMilliseconds(timestamp: Timestamp): number {
  return Number(timestamp.seconds) * 1000 + Math.floor(timestamp.nanos / 1e6);
}

function fromDateTimeMatch(match: RegExpExecArray): Timestamp | undefined {
  const [, yearText, monthText, dayText, hourText, minuteText, secondText, fraction, offset] = match;
  const year = Number(yearText);
  const month = Number(monthText);
  const day = Number(dayText);
  const hour = Number(hourText);
  const minute = Number(minuteText);
  // A leap second (:60) is folded into :59 rather than refused.
  const second = Math.min(Number(secondText), 59);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined;
  if (hour > 23 || minute > 59 || Number(secondText) > 60) return undefined;

  // Date.UTC maps years 0..99 onto 1900..1999, so the year is set separately.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, 0);
  const offsetSeconds = parseOffsetSeconds(offset);
  if (offsetSeconds === undefined) return undefined;
  const seconds = date.getTime() / 1000 - offsetSeconds;
  const nanos = fraction === undefined ? 0 : Number(fraction.slice(0, 9).padEnd(9, "0"));
  return fromParts(seconds, nanos);
}

function parseOffsetSeconds(offset: string | undefined): number | undefined {
  if (offset === undefined || offset === "Z" || offset === "z") return 0;
  const digits = offset.slice(1).replace(":", "");
  const hours = Number(digits.slice(0, 2));
  const minutes = Number(digits.slice(2, 4));
  if (hours > 23 || minutes > 59) return undefined;
  const sign = offset.startsWith("-") ? -1 : 1;
  return sign * (hours * 3600 + minutes * 60);
}

function daysInMonth(year: number, month: number): number {
  const date = new Date(0);
  date.setUTCFullYear(year, month, 0);
  return date.getUTCDate();
}

function fromParts(seconds: number, nanos: number): Timestamp | undefined {
  if (!Number.isSafeInteger(seconds) || seconds < MIN_SECONDS || seconds > MAX_SECONDS) return undefined;
  return create(TimestampSchema, { seconds: BigInt(seconds), nanos });
}
