import type { Sql } from "../runtime/database.js";

/**
 * The chat receiver's limit: calls per minute per organization route, counted in Postgres so every
 * replica shares one count. A fixed one-minute window by the database clock; one round trip.
 */
export function createChatRateLimit(sql: Sql, perMinute: number) {
  let lastCleanup = 0;
  return {
    /** Counts this call; answers how long to wait when it is over the limit. */
    async take(orgSlug: string): Promise<{ allowed: true } | { allowed: false; retryAfterSeconds: number }> {
      const [row] = await sql<{ calls: number; retry_after: number }[]>`
        insert into intake.chat_rate_windows as w (org_slug, window_start, calls)
        values (${orgSlug}, date_trunc('minute', now()), 1)
        on conflict (org_slug, window_start) do update set calls = w.calls + 1
        returning w.calls, ceil(extract(epoch from (w.window_start + interval '1 minute' - now())))::int as retry_after`;
      if (Date.now() - lastCleanup > 60_000) {
        lastCleanup = Date.now();
        void sql`delete from intake.chat_rate_windows where window_start < now() - interval '5 minutes'`.catch(() => {});
      }
      if (row!.calls <= perMinute) return { allowed: true };
      return { allowed: false, retryAfterSeconds: Math.max(1, row!.retry_after) };
    },
  };
}
