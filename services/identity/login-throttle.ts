import type { Sql } from "../runtime/data/database.js";

/**
 * Failed logins, counted in Postgres so every replica shares them, under three keys:
 * - the (organization, email) and client address pair: a guesser at one account from one address;
 * - the client address, over every account: a guesser at many accounts;
 * - the (organization, email), over every address: a guesser from many addresses (a new address for
 *   every guess). This one refuses every attempt that brings no second factor of evidence: an
 *   address the account has logged in from within `knownAddressDays` (90). So a distributed guesser gets
 *   only the account's free failures, and cannot spend them for the real person, who logs in from
 *   where they logged in before (and is then limited by the pair and address keys only).
 * Once a key has had its free number of failures it is locked for 1 s, and each further failure
 * doubles that (2 s, 4 s, ... up to 15 minutes); a locked login answers 429 with Retry-After before
 * any password is hashed. A key forgets its failures 15 minutes after the last one.
 *
 * Every attempt reserves its failure before the password is hashed, in one transaction that locks
 * the key rows, so concurrent attempts (on any replica) never get past the limit; a successful login
 * gives its reservation back and clears the account's failures, and so does an attempt the hashing
 * queue refused for capacity: that is no failed login.
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
  /** How long a successful login's address counts as evidence for its account. */
  knownAddressDays: 90,
  /** The most addresses kept per account, the latest ones. */
  knownAddressesPerAccount: 20,
} as const;

/** The (organization, email) key an account's failures, known addresses and hash-queue share go by. */
export function accountKey(org: string, email: string): string {
  return `${org}\n${email.toLowerCase()}`;
}

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
    const account = accountKey(org, email);
    // Sorted by (scope, key), the order the rows are locked in, so two attempts never deadlock.
    return [
      { scope: "account" as const, key: account, free: LOGIN_THROTTLE.accountFreeFailures },
      { scope: "address" as const, key: address, free: LOGIN_THROTTLE.addressFreeFailures },
      { scope: "pair" as const, key: `${account}\n${address}`, free: LOGIN_THROTTLE.pairFreeFailures },
    ];
  };
  return {
    /** Whether the account has logged in from this address within `knownAddressDays`: the second factor of evidence. */
    async isKnown(org: string, email: string, address: string): Promise<boolean> {
      const [row] = await sql<{ known: boolean }[]>`
        select exists (select 1 from identity.login_known_addresses where account = ${accountKey(org, email)} and address = ${address}
                         and last_success_at > now() - make_interval(days => ${LOGIN_THROTTLE.knownAddressDays})) as known`;
      return row!.known;
    },
    /**
     * Reserves one failure of this attempt under each key and answers 0, or answers the seconds to
     * wait (reserving nothing) when the address or the pair is locked, or the account is and the
     * address is not `known` to it.
     */
    async reserve(org: string, email: string, address: string, known: boolean): Promise<number> {
      const [account, byAddress, pair] = keys(org, email, address);
      const wait = await sql.begin(async (tx): Promise<number> => {
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
        const waits = [row("address")?.wait ?? 0, row("pair")?.wait ?? 0, known ? 0 : (row("account")?.wait ?? 0)];
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
        void sql`delete from identity.login_known_addresses where last_success_at < now() - make_interval(days => ${LOGIN_THROTTLE.knownAddressDays})`.catch(
          () => {},
        );
      }
      return wait;
    },
    /**
     * The attempt was not checked (the hashing queue refused it for capacity): its reservation is
     * given back under every key, and a lock it started is lifted.
     */
    async release(org: string, email: string, address: string): Promise<void> {
      const [account, byAddress, pair] = keys(org, email, address);
      await sql`
        update identity.login_failures as f set
          failures = greatest(f.failures - 1, 0),
          locked_until = case when f.failures - 1 < v.free then null else f.locked_until end
        from (values (${account!.scope}::text, ${account!.key}::text, ${account!.free}::int), (${byAddress!.scope}::text, ${byAddress!.key}::text, ${byAddress!.free}::int),
                     (${pair!.scope}::text, ${pair!.key}::text, ${pair!.free}::int)) as v(scope, key, free)
        where f.scope = v.scope and f.key = v.key`;
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
    /**
     * The right password: the account's and the pair's failures are cleared, the address's
     * reservation given back, and the address becomes evidence for the account (its latest
     * `knownAddressesPerAccount` addresses are kept).
     */
    async succeeded(org: string, email: string, address: string): Promise<void> {
      const [account, byAddress, pair] = keys(org, email, address);
      await sql`delete from identity.login_failures
                where (scope = ${account!.scope} and key = ${account!.key}) or (scope = ${pair!.scope} and key = ${pair!.key})`;
      await sql`
        update identity.login_failures set
          failures = greatest(failures - 1, 0),
          locked_until = case when failures - 1 < ${byAddress!.free} then null else locked_until end
        where scope = ${byAddress!.scope} and key = ${byAddress!.key}`;
      await sql`
        insert into identity.login_known_addresses (account, address, last_success_at) values (${account!.key}, ${address}, now())
        on conflict (account, address) do update set last_success_at = now()`;
      await sql`
        delete from identity.login_known_addresses where account = ${account!.key} and address not in (
          select address from identity.login_known_addresses where account = ${account!.key}
          order by last_success_at desc limit ${LOGIN_THROTTLE.knownAddressesPerAccount})`;
    },
  };
}
