import type { Sql } from "../runtime/database.js";

/**
 * Failed logins, counted per (organization, email) and per client address in Postgres so every
 * replica shares them. Past a free number of failures each further failure locks the key for a
 * doubling time (1 s, 2 s, 4 s, ... up to 15 minutes); while locked, a login answers 429 with
 * Retry-After before any password is hashed. A key forgets its failures 15 minutes after the last
 * one; a successful login clears its (organization, email) key.
 */
export const LOGIN_THROTTLE = {
  /** Failures of one (organization, email) before backoff starts. */
  accountFreeFailures: 5,
  /** Failures from one client address, over every account, before backoff starts. */
  addressFreeFailures: 20,
  maxLockSeconds: 15 * 60,
  forgetAfterSeconds: 15 * 60,
} as const;

/**
 * Throttles password guessing per account and per client address, in the database so every replica
 * counts alike: `lockedFor` before a login, `failed` and `succeeded` after it.
 */
export function createLoginThrottle(sql: Sql) {
  let lastCleanup = 0;
  const keys = (org: string, email: string, address: string) => [
    { scope: "account", key: `${org}\n${email.toLowerCase()}`, free: LOGIN_THROTTLE.accountFreeFailures },
    { scope: "address", key: address, free: LOGIN_THROTTLE.addressFreeFailures },
  ];
  return {
    /** Seconds to wait when the account or the address is locked, else 0. */
    async lockedFor(org: string, email: string, address: string): Promise<number> {
      const [account, byAddress] = keys(org, email, address);
      const [row] = await sql<{ wait: number | null }[]>`
        select ceil(extract(epoch from max(locked_until) - now()))::int as wait from identity.login_failures
        where ((scope = ${account!.scope} and key = ${account!.key}) or (scope = ${byAddress!.scope} and key = ${byAddress!.key}))
          and locked_until > now()`;
      return Math.max(0, row?.wait ?? 0);
    },
    async failed(org: string, email: string, address: string): Promise<void> {
      for (const { scope, key, free } of keys(org, email, address)) {
        await sql`
          insert into identity.login_failures as f (scope, key, failures, last_failure_at, locked_until)
          values (${scope}, ${key}, 1, now(), null)
          on conflict (scope, key) do update set
            failures = case when f.last_failure_at < now() - make_interval(secs => ${LOGIN_THROTTLE.forgetAfterSeconds}) then 1 else f.failures + 1 end,
            last_failure_at = now(),
            locked_until = case
              when f.last_failure_at < now() - make_interval(secs => ${LOGIN_THROTTLE.forgetAfterSeconds}) or f.failures + 1 <= ${free} then null
              else now() + make_interval(secs => least(${LOGIN_THROTTLE.maxLockSeconds}, power(2, least(f.failures + 1 - ${free} - 1, 20))))
            end`;
      }
      if (Date.now() - lastCleanup < 60_000) return;
      lastCleanup = Date.now();
      void sql`delete from identity.login_failures where last_failure_at < now() - make_interval(secs => ${LOGIN_THROTTLE.forgetAfterSeconds})
                 and (locked_until is null or locked_until < now())`.catch(() => {});
    },
    async succeeded(org: string, email: string): Promise<void> {
      await sql`delete from identity.login_failures where scope = 'account' and key = ${`${org}\n${email.toLowerCase()}`}`;
    },
  };
}
