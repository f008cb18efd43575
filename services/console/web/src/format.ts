// Times as people on call read them: "4 min ago", "in 2 h 5 min", with the exact time on hover.

function span(ms: number): string {
  const seconds = Math.round(Math.abs(ms) / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
  const days = Math.floor(hours / 24);
  return hours % 24 ? `${days} d ${hours % 24} h` : `${days} d`;
}

/** A time from the API: RFC 3339, or null when the service has none (a message field left unset). */
export type Time = string | null;

/** How long ago `at` was, in words ("just now", "4 min ago"). */
export function ago(at: Time, now: number): string {
  if (!at) return "unknown";
  const ms = now - Date.parse(at);
  if (ms < 10_000) return "just now";
  return `${span(ms)} ago`;
}

/** How long ago `at` was in its largest unit ("4 min ago", "2 h ago"): one short line in a table. */
export function agoShort(at: Time, now: number): string {
  if (!at) return "unknown";
  const ms = now - Date.parse(at);
  if (ms < 10_000) return "just now";
  return `${span(ms).split(" ").slice(0, 2).join(" ")} ago`;
}

/** How long until `at`, or how long it is overdue, in words. */
export function until(at: Time, now: number): string {
  if (!at) return "unknown";
  const ms = Date.parse(at) - now;
  return ms >= 0 ? `in ${span(ms)}` : `overdue by ${span(ms)}`;
}

/** The exact local date and time of `at` with its time zone, e.g. "27 Nov 2026, 03:12:05 UTC". */
export function exact(at: Time): string {
  if (!at) return "";
  const date = new Date(at);
  if (Number.isNaN(date.getTime())) return at;
  return date.toLocaleString(undefined, {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    timeZoneName: "short",
  });
}

/** The browser's time zone, as the console shows times in it (e.g. "Europe/Berlin"). */
export function timeZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
}

/** How long from `from` to `to`, in words ("2 h 5 min"). */
export function duration(from: Time, to: Time): string {
  if (!from || !to) return "unknown";
  return span(Date.parse(to) - Date.parse(from));
}

/** A number of seconds in the largest whole unit (h, min or s). */
export function seconds(value: number): string {
  if (value % 3600 === 0 && value >= 3600) return `${value / 3600} h`;
  if (value % 60 === 0 && value >= 60) return `${value / 60} min`;
  return `${value} s`;
}

/** A value for <input type="datetime-local"> in the browser's time zone. */
export function toLocalInput(date: Date): string {
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

/** Only http(s) links are rendered as links; anything else is shown as text. */
export function safeHref(url: string | null | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.toString() : undefined;
  } catch {
    return undefined;
  }
}
