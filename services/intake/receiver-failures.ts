import type { Sql } from "../runtime/database.js";

/**
 * Failed receiver authentications, counted per scope (a chat route, or the alert-router receiver)
 * and client address in one-minute windows in Postgres, so every replica shares the count. Past
 * `perMinute` failures an address gets 429 on that scope until the window ends, whatever secret it
 * sends: guessing is slowed, and a sender elsewhere with the right secret is not affected.
 */
export function createReceiverFailures(sql: Sql, perMinute: number) {
  let lastCleanup = 0;
  return {
    /** Answers how long to wait when this address has failed too often on this scope. */
    async check(scope: string, clientAddress: string): Promise<{ allowed: true } | { allowed: false; retryAfterSeconds: number }> {
      const [row] = await sql<{ failures: number; retry_after: number }[]>`
        select failures, ceil(extract(epoch from (window_start + interval '1 minute' - now())))::int as retry_after
        from intake.receiver_failures
        where scope = ${scope} and client_address = ${clientAddress} and window_start = date_trunc('minute', now())`;
      if (!row || row.failures < perMinute) return { allowed: true };
      return { allowed: false, retryAfterSeconds: Math.max(1, row.retry_after) };
    },
    async record(scope: string, clientAddress: string): Promise<void> {
      await sql`
        insert into intake.receiver_failures as f (scope, client_address, window_start, failures)
        values (${scope}, ${clientAddress}, date_trunc('minute', now()), 1)
        on conflict (scope, client_address, window_start) do update set failures = f.failures + 1`;
      if (Date.now() - lastCleanup > 60_000) {
        lastCleanup = Date.now();
        void sql`delete from intake.receiver_failures where window_start < now() - interval '5 minutes'`.catch(() => {});
      }
    },
  };
}
