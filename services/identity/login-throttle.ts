import type { Sql } from "../runtime/database.js";

/**
 * Failed logins, counted in Postgres so every replica shares them, under three keys:
 * - the (organization, email) and client address pair: a guesser at one account from one address;
 * - the client address, over every account: a guesser at many accounts;
 * - the (organization, email), over every address: a guesser from many addresses. This one refuses
 *   only addresses that have themselves failed against the account, so a stranger's failures never
 *   lock the real person out from where they log in.
 * Once a key has had its free number of failures it is locked for 1 s, and each further failure
 * doubles that (2 s, 4 s, ... up to 15 minutes); a locked login answers 429 with Retry-After before
 * any password is hashed. A key forgets its failures 15 minutes after the last one.
 *
 * Every attempt reserves its failure before the password is hashed, in one transaction that locks
 * the key rows, so concurrent attempts (on any replica) never get past the limit; a successful login
 * gives its reservation back and clears the account's failures. An attempt the hashing queue refuses
 * keeps its reservation: it counts against its sender.
 */
export const LOGIN_THROTTLE = {
  /** Failures of one (organization, email) from one address before it is locked. */
  pairFreeFailures: 5,
  /** Failures of one (organization, email) from all addresses before those that failed are locked. */
  accountFreeFailures: 5,
  /** Failures from one client address, over every account, before it is locked. */
  addressFreeFailures: 20,
  maxLockSeconds: 15 * 60,
  forgetAfterSeconds: 15 * 60,
} as const;

type Scope = "account" | "address" | "pair";

interface KeyRow {
  scope: Scope;
  failures: number;
  stale: boolean;
  wait: number | null;
}

/**
 * Throttles password guessing per account, per address and per pair, in the database so every
 * replica counts alike: `reserve` before hashing, `succeeded` after a right password.
 */
export function createLoginThrottle(sql: Sql) {
  let lastCleanup = 0;
  const keys = (org: string, email: string, address: string) => {
    const account = `${org}\n${email.toLowerCase()}`;
    // Sorted by (scope, key), the order the rows are locked in, so two attempts never deadlock.
    return [
      { scope: "account" as const, key: account, free: LOGIN_THROTTLE.accountFreeFailures },
      { scope: "address" as const, key: address, free: LOGIN_THROTTLE.addressFreeFailures },
      { scope: "pair" as const, key: `${account}\n${address}`, free: LOGIN_THROTTLE.pairFreeFailures },
    ];
  };
  return {
    /**
     * Reserves one failure of this attempt under each key and answers 0, or answers the seconds to
     * wait (reserving nothing) when the address, the pair, or the account for an address that has
     * failed against it, is locked.
     */
    async reserve(org: string, email: string, address: string): Promise<number> {
      const [account, byAddress, pair] = keys(org, email, address);
      const wait = await sql.begin(async (tx) => {
        await tx`
          insert into identity.login_failures (scope, key, failures, last_failure_at, locked_until)
          values (${account!.scope}, ${account!.key}, 0, now(), null), (${byAddress!.scope}, ${byAddress!.key}, 0, now(), null),
                 (${pair!.scope}, ${pair!.key}, 0, now(), null)
          on conflict (scope, key) do nothing`;
        const rows = await tx<KeyRow[]>`
          select scope, failures,
                 last_failure_at < now() - make_interval(secs => ${LOGIN_THROTTLE.forgetAfterSeconds}) as stale,
                 case when locked_until > now() then ceil(extract(epoch from locked_until - now()))::int end as wait
          from identity.login_failures
          where (scope = ${account!.scope} and key = ${account!.key}) or (scope = ${byAddress!.scope} and key = ${byAddress!.key})
             or (scope = ${pair!.scope} and key = ${pair!.key})
          order by scope, key
          for update`;
        const row = (scope: Scope) => rows.find((r) => r.scope === scope);
        const pairRow = row("pair");
        const pairFailed = pairRow !== undefined && !pairRow.stale && pairRow.failures > 0;
        const waits = [row("address")?.wait ?? 0, pairRow?.wait ?? 0, pairFailed ? (row("account")?.wait ?? 0) : 0];
        const locked = Math.max(...waits);
        if (locked > 0) return locked;
        await tx`
          update identity.login_failures as f set
            failures = case when f.last_failure_at < now() - make_interval(secs => ${LOGIN_THROTTLE.forgetAfterSeconds}) then 1 else f.failures + 1 end,
            last_failure_at = now(),
            locked_until = case
              when f.last_failure_at < now() - make_interval(secs => ${LOGIN_THROTTLE.forgetAfterSeconds}) then case when v.free <= 1 then now() + interval '1 second' end
              when f.failures + 1 < v.free then null
              else now() + make_interval(secs => least(${LOGIN_THROTTLE.maxLockSeconds}, power(2, least(f.failures + 1 - v.free, 20))))
            end
          from (values (${account!.scope}::text, ${account!.key}::text, ${account!.free}::int), (${byAddress!.scope}::text, ${byAddress!.key}::text, ${byAddress!.free}::int),
                       (${pair!.scope}::text, ${pair!.key}::text, ${pair!.free}::int)) as v(scope, key, free)
          where f.scope = v.scope and f.key = v.key`;
        return 0;
      });
      if (Date.now() - lastCleanup >= 60_000) {
        lastCleanup = Date.now();
        void sql`delete from identity.login_failures where last_failure_at < now() - make_interval(secs => ${LOGIN_THROTTLE.forgetAfterSeconds})
                   and (locked_until is null or locked_until < now())`.catch(() => {});
      }
      return wait;
    },
    /**
     * A wrong password: the reserved failure stands, and a lock it started runs from now, the
     * password's check having taken its time.
     */
    async failed(org: string, email: string, address: string): Promise<void> {
      const [account, byAddress, pair] = keys(org, email, address);
      await sql`
        update identity.login_failures set
          locked_until = now() + (locked_until - last_failure_at),
          last_failure_at = now()
        where ((scope = ${account!.scope} and key = ${account!.key}) or (scope = ${byAddress!.scope} and key = ${byAddress!.key})
            or (scope = ${pair!.scope} and key = ${pair!.key}))
          and locked_until > now()`;
    },
    /** The right password: the account's and the pair's failures are cleared, the address's reservation given back. */
    async succeeded(org: string, email: string, address: string): Promise<void> {
      const [account, byAddress, pair] = keys(org, email, address);
      await sql`delete from identity.login_failures
                where (scope = ${account!.scope} and key = ${account!.key}) or (scope = ${pair!.scope} and key = ${pair!.key})`;
      await sql`
        update identity.login_failures set
          failures = greatest(failures - 1, 0),
          locked_until = case when failures - 1 < ${byAddress!.free} then null else locked_until end
        where scope = ${byAddress!.scope} and key = ${byAddress!.key}`;
    },
  };
}
