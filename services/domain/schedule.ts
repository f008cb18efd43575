import { CronExpressionParser } from "cron-parser";
import { InvalidArgumentError } from "../runtime/errors.js";

/**
 * Cron schedules. The expressions are the crontab ones: five fields (minute, hour, day of month,
 * month, day of week) or an alias (@hourly, @daily, @midnight, @weekly, @monthly, @yearly,
 * @annually), read in an IANA time zone.
 *
 * cron-parser does the calendar work. Across DST changes it follows the wall clock the way cron
 * does: on a fall-back day a fixed time (30 1 * * *) fires once, while a schedule with a wildcard
 * hour (0 * * * *, *\/30 * * * *) fires in both copies of the repeated hour; on a spring-forward
 * day a time inside the skipped hour counts as the same time an hour later. Either way the
 * deadline is never earlier than the run cron itself would start.
 */

const ALIASES: Record<string, string> = {
  "@hourly": "@hourly",
  "@daily": "@daily",
  "@midnight": "@daily",
  "@weekly": "@weekly",
  "@monthly": "@monthly",
  "@yearly": "@yearly",
  "@annually": "@yearly",
};
const MAX_SCHEDULE_CHARACTERS = 200;
/** Scheduled times looked at to bound the gap between two of them. */
const GAP_SAMPLES = 2000;
const GAP_HORIZON_MS = 400 * 86_400_000;
/** Added to the sampled gap: a DST change the sample did not reach moves a gap by an hour. */
const DST_MARGIN_SECONDS = 3600;
/** The longest gap accepted: a schedule that runs less than yearly cannot be watched. */
const MAX_GAP_SECONDS = 366 * 86_400 + DST_MARGIN_SECONDS;

export interface CheckedSchedule {
  schedule: string;
  timezone: string;
  /** An upper bound of the time between two scheduled runs. */
  gapSeconds: number;
}

/** The IANA time zone given, or UTC when none is; an unknown one is InvalidArgument. */
export function checkTimezone(value: string | undefined): string {
  const timezone = value?.trim() || "UTC";
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: timezone });
  } catch {
    throw new InvalidArgumentError(`timezone "${timezone}" is not an IANA time zone (for example Europe/Berlin or America/New_York)`);
  }
  return timezone;
}

/**
 * A cron expression (five fields or an @ alias) and its time zone, checked and normalized; a
 * schedule that cannot be read is InvalidArgument saying why.
 */
export function checkSchedule(value: string, timezoneValue: string | undefined): CheckedSchedule {
  const text = value.trim().replace(/\s+/g, " ");
  if (!text) throw new InvalidArgumentError('schedule is empty: send a cron expression such as "0 3 * * *" or @daily');
  if (text.length > MAX_SCHEDULE_CHARACTERS) throw new InvalidArgumentError(`schedule must be at most ${MAX_SCHEDULE_CHARACTERS} characters`);
  const timezone = checkTimezone(timezoneValue);
  let schedule: string;
  if (text.startsWith("@")) {
    const alias = ALIASES[text.toLowerCase()];
    if (!alias) throw new InvalidArgumentError(`schedule "${text}" is not a known alias: use one of ${Object.keys(ALIASES).join(", ")}`);
    schedule = text.toLowerCase();
  } else {
    if (text.split(" ").length !== 5) {
      throw new InvalidArgumentError(`schedule "${text}" must have five fields (minute hour day-of-month month day-of-week) or be an alias such as @hourly`);
    }
    schedule = text;
  }
  const gapSeconds = measureGap(schedule, timezone);
  return { schedule, timezone, gapSeconds };
}

function expressionOf(schedule: string): string {
  return schedule.startsWith("@") ? ALIASES[schedule]! : schedule;
}

function iterate(schedule: string, timezone: string, from: Date) {
  try {
    return CronExpressionParser.parse(expressionOf(schedule), { tz: timezone, currentDate: from, strict: false });
  } catch (err) {
    throw new InvalidArgumentError(`schedule "${schedule}" is not a valid cron expression: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** The first scheduled time strictly after `from`. */
export function nextScheduled(schedule: string, timezone: string, from: Date): Date {
  return iterate(schedule, timezone, from).next().toDate();
}

function measureGap(schedule: string, timezone: string): number {
  const start = new Date();
  const it = iterate(schedule, timezone, start);
  let previous: number | undefined;
  let gap = 0;
  for (let i = 0; i < GAP_SAMPLES; i++) {
    let at: number;
    try {
      at = it.next().toDate().getTime();
    } catch {
      break;
    }
    if (previous !== undefined) gap = Math.max(gap, (at - previous) / 1000);
    else gap = (at - start.getTime()) / 1000;
    previous = at;
    if (at - start.getTime() > GAP_HORIZON_MS) break;
  }
  if (previous === undefined) throw new InvalidArgumentError(`schedule "${schedule}" never fires`);
  const bound = Math.ceil(gap) + DST_MARGIN_SECONDS;
  if (bound > MAX_GAP_SECONDS) throw new InvalidArgumentError(`schedule "${schedule}" runs less often than once a year; a heartbeat cannot watch it`);
  return bound;
}

/** The `count`th expected ping after `since`: on the schedule, or `count` intervals on. */
export function expectedAfter(since: Date, kind: { interval: number | null; schedule: string | null; timezone: string | null }, count: number): Date {
  if (!kind.schedule) return new Date(since.getTime() + count * kind.interval! * 1000);
  let at = since;
  for (let n = 0; n < count; n++) at = nextScheduled(kind.schedule, kind.timezone ?? "UTC", at);
  return at;
}
