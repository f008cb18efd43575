import { randomUUID } from "node:crypto";
import type { Sql, TransactionSql } from "../runtime/data/database.js";
import { backgroundShouldYield } from "../runtime/concurrency/background-yield.js";
import { recordAudit } from "../runtime/transport/events.js";
import { groupCalls } from "../runtime/transport/grouped-calls.js";
import {
  subscriptionAttemptDuration,
  subscriptionAttempts,
  subscriptionBacklog,
  subscriptionDeliveriesGivenUp,
  subscriptionDeliveriesWaiting,
  subscriptionsDisabled,
} from "../runtime/observability/metrics.js";
import { AUDIT_KINDS, readEgress, type SubscriptionsDeps } from "./deps.js";
import { nextRetryDelayMs, RETRY_WINDOW_MS } from "./retry-schedule.js";
import { postSigned, type AttemptResult } from "./send.js";
import { signingSecrets, type DeliveryRow, type SubscriptionRow } from "./store.js";

export interface DeliveryWorkerOptions {
  /** Deliveries in flight in this process, over every subscription. */
  maxInFlight: number;
  /** How often due deliveries (retries) are looked for when nothing pokes the worker. */
  pollMs: number;
}

export interface DeliveryWorker {
  start(): void;
  /** Looks for due deliveries soon. */
  poke(): void;
  /** Stops claiming and waits for the attempts in flight. */
  stop(): Promise<void>;
}

type Claimed = DeliveryRow & { claim: string };

/** One attempt's record in the common case; `retryWaitMs` null when the delivery is settled by it. */
interface Settlement {
  id: string;
  claim: string;
  status: number;
  latencyMs: number;
  response: string;
  error: string | null;
  outcome: "delivered" | "failed" | "simulated";
  retryWaitMs: number | null;
}

/** A claim lasts the attempt's budget and a margin; past it, another process may take the delivery. */
const LEASE_MARGIN_MS = 30_000;
/** Settled deliveries (and their attempts) are kept this long in the log, then deleted. */
export const LOG_RETENTION_DAYS = 30;
const RETENTION_SWEEP_MS = 10 * 60 * 1000;
/** While the process gives way, a subscription whose attempt just failed waits this long for its next. */
export const FAILING_PROBE_WHILE_GIVING_WAY_MS = 5_000;
/** When the egress switch cannot be read, the delivery waits this long, its attempt not counted. */
const SWITCH_UNKNOWN_RETRY_MS = 5_000;

/**
 * Sends due deliveries, never on a request's path: claims them from the database (so replicas
 * share them and a crashed process's claims expire), at most SUBSCRIPTION_CONCURRENCY in flight
 * per subscription over every process, so one slow receiver holds only its own slots. While the
 * process's deliveries keep its event loop busy, each subscription gets one slot and the worker
 * claims once a tick (at most one send per subscription a tick): the sends wait for the storm
 * rather than slow the alerts it brings, and each receiver still progresses.
 */
export function createDeliveryWorker(deps: SubscriptionsDeps, options: DeliveryWorkerOptions): DeliveryWorker {
  const { sql, config, logger } = deps;
  // Every label value at 0 from the start: the alert rules' increase() and rate() see the first.
  for (const outcome of ["delivered", "failed", "gone", "simulated"]) subscriptionAttempts.inc({ outcome }, 0);
  for (const reason of ["gone", "failing"]) subscriptionsDisabled.inc({ reason }, 0);
  const leaseMs = Math.round(config.SUBSCRIPTION_TIMEOUT_SECONDS * 1000) + LEASE_MARGIN_MS;
  const inFlight = new Set<Promise<void>>();
  let timer: NodeJS.Timeout | undefined;
  let retention: NodeJS.Timeout | undefined;
  let claiming: Promise<void> | undefined;
  let again = false;
  let stopped = true;
  /** Timer ticks in a row whose claim found nothing: an idle worker looks only every fourth tick. */
  let idleTicks = 0;
  /** Something may be due that the next tick claims (a poke deferred while giving way). */
  let dueAtTick = false;
  /**
   * Subscriptions whose last attempt here failed, and until when they rest while the process gives
   * way: a receiver that is down gets a probe every few seconds rather than a failing post per
   * tick, each a TLS handshake and a retry to schedule, through a storm it cannot take anyway.
   */
  const restingUntil = new Map<string, number>();
  function restingNow(): string[] {
    const now = Date.now();
    for (const [id, until] of restingUntil) if (until <= now) restingUntil.delete(id);
    return [...restingUntil.keys()];
  }

  /**
   * Claims due deliveries in one transaction: the subscriptions with something due are locked
   * (SKIP LOCKED: another process claiming for one of them skips it; NO KEY UPDATE: the fan-out,
   * which only takes a key share, never waits for it), so counting the ones in
   * flight and claiming up to the limit cannot race with another process doing the same.
   */
  async function claim(room: number, perSubscription: number, resting: string[] = []): Promise<Claimed[]> {
    const token = randomUUID();
    return sql.begin(async (tx) => {
      const rows = await tx<Claimed[]>`
        with subs as (
          select s.id from subscriptions.subscriptions s
          where s.state = 'enabled' and s.id <> all(${resting}::uuid[])
            and exists (
              select 1 from subscriptions.deliveries d
              where d.subscription_id = s.id and ${due(tx)})
          order by s.id
          limit 200
          for no key update of s skip locked
        ), busy as (
          select d.subscription_id, count(*)::int as n from subscriptions.deliveries d
          where d.subscription_id in (select id from subs) and d.state = 'delivering' and d.claimed_until >= now()
          group by d.subscription_id
        ), chosen as (
          -- At most the free slots of each subscription, oldest due first, read off its index.
          select c.id, c.next_attempt_at from subs
          left join busy b on b.subscription_id = subs.id
          cross join lateral (
            select d.id, d.next_attempt_at from subscriptions.deliveries d
            where d.subscription_id = subs.id and ${due(tx)}
            order by d.next_attempt_at
            limit greatest(0, ${perSubscription} - coalesce(b.n, 0))
          ) c
          order by c.next_attempt_at
          limit ${room}
        )
        update subscriptions.deliveries d set
          state = 'delivering',
          claim = ${token},
          claimed_until = now() + ${`${leaseMs} milliseconds`}::interval,
          attempt_count = d.attempt_count + 1
        from chosen where d.id = chosen.id
        returning d.*`;
      return rows;
    });
  }

  async function disable(tx: TransactionSql, sub: SubscriptionRow, reason: string, kind: "gone" | "failing"): Promise<void> {
    const [changed] = await tx<{ id: string }[]>`
      update subscriptions.subscriptions set state = 'disabled', disabled_reason = ${reason}, disabled_at = now(), updated_at = now()
      where id = ${sub.id} and state = 'enabled' returning id`;
    if (!changed) return;
    subscriptionsDisabled.inc({ reason: kind });
    await recordAudit(deps.outbox, tx, { orgId: sub.org_id, kind: AUDIT_KINDS.disabled, actor: "warroom", data: { id: sub.id, reason } });
    logger.warn({ subscription: sub.id, reason }, "subscription disabled");
  }

  /**
   * Whether an attempt's outcome changes the subscription itself: a success ends its failing, a
   * first failure starts it, a failure past SUBSCRIPTION_DISABLE_AFTER_SECONDS or a 410 disables
   * it. Judged on the subscription as the batch read it, with this process's clock: a late
   * judgement only moves the change to the next attempt.
   */
  function changesSubscription(sub: SubscriptionRow, result: AttemptResult): boolean {
    if (result.ok) return sub.failing_since !== null;
    if (result.status === 410 || sub.failing_since === null) return true;
    return Date.now() - sub.failing_since.getTime() >= config.SUBSCRIPTION_DISABLE_AFTER_SECONDS * 1000;
  }

  /** The wait before the next try, counted from the last redelivery; undefined once the schedule is spent. */
  function retryDelay(delivery: Claimed, result: AttemptResult): number | undefined {
    const failures = delivery.attempt_count - delivery.attempts_before_window;
    return nextRetryDelayMs(config.SUBSCRIPTION_RETRY_SCHEDULE_SECONDS, failures, result.retryAfterMs);
  }

  /**
   * Writes the common cases' attempts (a success, or one more failure of a subscription already
   * failing) a group at a time, one statement per group, never locking the subscription row (which
   * the claims would then skip): the attempts that end while a group is written make the next. One
   * statement per attempt was most of a storm's statements for the subscriptions
   * (`npm run bench -- fan-out`).
   */
  const settle = groupCalls<Settlement>(async (group) => {
    const window = `${RETRY_WINDOW_MS} milliseconds`;
    const settled = await sql<{ state: string }[]>`
      with input as (
        select * from unnest(${group.map((g) => g.id)}::text[], ${group.map((g) => g.claim)}::uuid[], ${group.map((g) => g.status)}::int[],
          ${group.map((g) => g.latencyMs)}::int[], ${group.map((g) => g.response)}::text[], ${group.map((g) => g.error)}::text[],
          ${group.map((g) => g.outcome)}::text[], ${group.map((g) => g.retryWaitMs)}::float8[])
          as i(id, claim, status, latency_ms, response, error, outcome, wait_ms)
      ), attempt as (
        insert into subscriptions.attempts (delivery_id, status, latency_ms, response, error, outcome)
        select i.id, i.status, i.latency_ms, i.response, i.error, i.outcome from input i
        where exists (select 1 from subscriptions.deliveries d where d.id = i.id)
      ), next as (
        select i.id, i.claim, i.outcome,
          case when i.wait_ms is not null and now() < d.window_start + ${window}::interval
               then least(now() + i.wait_ms * interval '1 millisecond', d.window_start + ${window}::interval) end as at
        from input i join subscriptions.deliveries d on d.id = i.id
      )
      update subscriptions.deliveries d set state = case when next.at is null then next.outcome else 'pending' end,
        next_attempt_at = next.at, claimed_until = null, claim = null
      from next
      where d.id = next.id and d.claim = next.claim
      returning d.state`;
    for (const row of settled) if (row.state === "failed") subscriptionDeliveriesGivenUp.inc();
  }, options.maxInFlight);

  /** Writes the attempt and what follows from it, if the claim is still this one. */
  async function finish(delivery: Claimed, sub: SubscriptionRow, result: AttemptResult | "simulated"): Promise<void> {
    const simulated = result === "simulated";
    if (simulated || !changesSubscription(sub, result)) {
      // The common cases in one statement, never locking the subscription row (which the claims
      // would then skip): a success, or one more failure of a subscription already failing.
      const outcome = simulated ? "simulated" : result.ok ? "delivered" : "failed";
      // A failure waits for its retry, or, past the schedule or the retry window, gives up.
      const wait = simulated || result.ok ? undefined : retryDelay(delivery, result);
      await settle({
        id: delivery.id,
        claim: delivery.claim,
        status: simulated ? 0 : result.status,
        latencyMs: simulated ? 0 : result.latencyMs,
        response: simulated ? "" : result.response,
        error: simulated ? "real egress is off for the organization: not sent" : (result.error ?? null),
        outcome,
        retryWaitMs: wait ?? null,
      });
      return;
    }
    await sql.begin(async (tx) => {
      // The subscription first, as a delete does (it then deletes the deliveries): taking the
      // delivery first would deadlock with a delete of its subscription.
      const [locked] = await tx`select 1 from subscriptions.subscriptions where id = ${sub.id} for no key update`;
      if (!locked) return;
      await tx`
        insert into subscriptions.attempts (delivery_id, status, latency_ms, response, error, outcome)
        values (${delivery.id}, ${result.status}, ${result.latencyMs}, ${result.response}, ${result.error ?? null}, ${result.ok ? "delivered" : "failed"})`;
      if (result.ok) {
        await tx`update subscriptions.deliveries set state = 'delivered', next_attempt_at = null, claimed_until = null, claim = null
                 where id = ${delivery.id} and claim = ${delivery.claim}`;
        await tx`update subscriptions.subscriptions set failing_since = null where id = ${sub.id} and failing_since is not null`;
        return;
      }
      if (result.status === 410) {
        // Gone: the receiver says it will never take another event. Retrying would be noise.
        await tx`update subscriptions.deliveries set state = 'failed', next_attempt_at = null, claimed_until = null, claim = null
                 where id = ${delivery.id} and claim = ${delivery.claim}`;
        subscriptionDeliveriesGivenUp.inc();
        await disable(tx, sub, "receiver answered HTTP 410 Gone", "gone");
        return;
      }
      const [clock] = await tx<{ now: Date }[]>`select now() as now`;
      const now = clock!.now.getTime();
      const windowEnd = delivery.window_start.getTime() + RETRY_WINDOW_MS;
      const wait = retryDelay(delivery, result);
      if (wait === undefined || now >= windowEnd) {
        await tx`update subscriptions.deliveries set state = 'failed', next_attempt_at = null, claimed_until = null, claim = null
                 where id = ${delivery.id} and claim = ${delivery.claim}`;
        subscriptionDeliveriesGivenUp.inc();
      } else {
        const at = new Date(Math.min(now + wait, windowEnd));
        await tx`update subscriptions.deliveries set state = 'pending', next_attempt_at = ${at}, claimed_until = null, claim = null
                 where id = ${delivery.id} and claim = ${delivery.claim}`;
      }
      const [failing] = await tx<{ failing_since: Date }[]>`
        update subscriptions.subscriptions set failing_since = coalesce(failing_since, now())
        where id = ${sub.id} returning failing_since`;
      if (failing && now - failing.failing_since.getTime() >= config.SUBSCRIPTION_DISABLE_AFTER_SECONDS * 1000) {
        await disable(tx, sub, `every delivery failed for ${formatDuration(config.SUBSCRIPTION_DISABLE_AFTER_SECONDS)}`, "failing");
      }
    });
  }

  /**
   * Sends a batch just claimed: each subscription read once, and the egress switch of each
   * organization read once, just before its attempts.
   */
  async function deliverBatch(batch: Claimed[]): Promise<void> {
    const ids = [...new Set(batch.map((d) => d.subscription_id))];
    const subs = new Map((await sql<SubscriptionRow[]>`select * from subscriptions.subscriptions where id = any(${ids}::uuid[])`).map((s) => [s.id, s]));
    const switches = new Map<string, Promise<boolean | undefined>>();
    const egressOf = (orgId: string) => {
      let known = switches.get(orgId);
      if (!known) {
        known = readEgress(deps, orgId, "the deliveries wait");
        switches.set(orgId, known);
      }
      return known;
    };
    for (const delivery of batch) track(deliver(delivery, subs.get(delivery.subscription_id), egressOf), delivery);
  }

  async function deliver(delivery: Claimed, sub: SubscriptionRow | undefined, egressOf: (orgId: string) => Promise<boolean | undefined>): Promise<void> {
    if (!sub) return; // Deleted meanwhile: its deliveries went with it.
    const egressOn = await egressOf(sub.org_id);
    if (egressOn === undefined) {
      await sql`update subscriptions.deliveries set state = 'pending', attempt_count = attempt_count - 1, claim = null, claimed_until = null,
                  next_attempt_at = now() + ${`${SWITCH_UNKNOWN_RETRY_MS} milliseconds`}::interval
                where id = ${delivery.id} and claim = ${delivery.claim}`;
      return;
    }
    if (!egressOn) {
      subscriptionAttempts.inc({ outcome: "simulated" });
      await finish(delivery, sub, "simulated");
      return;
    }
    const result = await postSigned(deps.egress, sub.url, signingSecrets(deps.secretBox(), sub), delivery.id, delivery.payload);
    if (result.ok) restingUntil.delete(sub.id);
    else restingUntil.set(sub.id, Date.now() + FAILING_PROBE_WHILE_GIVING_WAY_MS);
    subscriptionAttempts.inc({ outcome: result.ok ? "delivered" : result.status === 410 ? "gone" : "failed" });
    subscriptionAttemptDuration.observe(result.latencyMs / 1000);
    await finish(delivery, sub, result);
  }

  /**
   * Hands claims back after a failure to record their outcome (the database was briefly away): due
   * again in a second, rather than when their lease runs out. If even this fails, the lease does it.
   */
  async function release(deliveries: Claimed[]): Promise<void> {
    await sql`
      update subscriptions.deliveries set state = 'pending', claim = null, claimed_until = null, next_attempt_at = now() + interval '1 second'
      where id = any(${deliveries.map((d) => d.id)}::text[]) and claim = any(${deliveries.map((d) => d.claim)}::uuid[])`.catch(() => {});
  }

  function track(work: Promise<void>, delivery: Claimed): void {
    const tracked = work
      .catch(async (err) => {
        logger.warn({ err: String(err), delivery: delivery.id }, "a delivery attempt could not be recorded; it is tried again");
        await release([delivery]);
      })
      .finally(() => {
        inFlight.delete(tracked);
        // A slot came free: there may be more due.
        poke();
      });
    inFlight.add(tracked);
  }

  async function runClaims(): Promise<void> {
    do {
      again = false;
      const room = options.maxInFlight - inFlight.size;
      if (room <= 0 || stopped) return;
      const yielding = backgroundShouldYield();
      let claimed: Claimed[];
      try {
        claimed = yielding ? await claim(room, 1, restingNow()) : await claim(room, config.SUBSCRIPTION_CONCURRENCY);
      } catch (err) {
        logger.warn({ err: String(err) }, "claiming due deliveries failed; will retry");
        return;
      }
      idleTicks = claimed.length === 0 && inFlight.size === 0 ? idleTicks + 1 : 0;
      if (claimed.length > 0) {
        await deliverBatch(claimed).catch(async (err) => {
          logger.warn({ err: String(err) }, "reading the claimed deliveries' subscriptions failed; they are tried again");
          await release(claimed);
        });
      }
      if (claimed.length === room) again = true;
      // Giving way, it claims once a tick: what came due meanwhile waits for the next one.
      if (yielding && again) {
        again = false;
        dueAtTick = true;
        return;
      }
    } while (again && !stopped);
  }

  /**
   * Looks for due deliveries now, or, while the process gives way to foreground work, at the next
   * tick: a storm's events and finished attempts then cost a claim a tick, not one each.
   */
  function poke(onTick = false): void {
    if (stopped) return;
    if (!onTick && backgroundShouldYield()) {
      dueAtTick = true;
      return;
    }
    if (claiming) {
      again = true;
      return;
    }
    claiming = runClaims().finally(() => {
      claiming = undefined;
      if (again) poke();
    });
  }

  /** Deletes settled deliveries past the retention, a bounded batch at a time (every replica may run it). */
  async function sweepLog(): Promise<void> {
    await sql`
      delete from subscriptions.deliveries where id in (
        select id from subscriptions.deliveries
        where state in ('delivered', 'simulated', 'failed', 'cancelled')
          and created_at < now() - ${`${LOG_RETENTION_DAYS} days`}::interval
        limit 5000)`;
  }

  return {
    start() {
      stopped = false;
      let tick = 0;
      // Busy, it looks every tick; idle (nothing claimed, nothing in flight), every fourth, so an
      // installation without subscriptions costs the database little. Pokes (a new event, a
      // redelivery, a finished attempt) look at once, or, while giving way, at the next tick.
      timer = setInterval(() => {
        tick++;
        if (dueAtTick || idleTicks < 4 || tick % 4 === 0) {
          dueAtTick = false;
          poke(true);
        }
      }, options.pollMs);
      timer.unref();
      retention = setInterval(() => {
        sweepLog().catch((err) => logger.warn({ err: String(err) }, "deleting old deliveries failed; will retry"));
      }, RETENTION_SWEEP_MS);
      retention.unref();
      poke();
    },
    poke: () => poke(),
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      if (retention) clearInterval(retention);
      await claiming;
      await Promise.allSettled([...inFlight]);
    },
  };
}

/**
 * A delivery `d` the worker may claim now: waiting and due, or in flight under a claim that lapsed
 * (its process stopped). The claim and the backlog on /metrics read the same rule.
 */
function due(sql: Sql | TransactionSql) {
  return sql`d.state in ('pending', 'delivering') and d.next_attempt_at <= now() and (d.state = 'pending' or d.claimed_until < now())`;
}

/**
 * The sender's backlog, for an alert on a storm outrunning it: the deliveries not yet settled
 * (counted over the index of those waiting, up to a million), and how long the longest-due
 * delivery of an enabled subscription has been due (one look-up on its index per subscription).
 * A delivery waiting for its retry to a receiver that is down is not due, so a down receiver alone
 * does not raise the second.
 */
export async function measureBacklog(sql: Sql): Promise<void> {
  const [row] = await sql<{ waiting: number; due_seconds: number | null }[]>`
    select
      (select count(*)::int from (
        select 1 from subscriptions.deliveries where state in ('pending', 'delivering') limit 1000000) w) as waiting,
      (select extract(epoch from now() - min(oldest.at))::float8 from subscriptions.subscriptions s
        cross join lateral (
          select d.next_attempt_at as at from subscriptions.deliveries d
          where d.subscription_id = s.id and ${due(sql)}
          order by d.next_attempt_at limit 1) oldest
        where s.state = 'enabled') as due_seconds`;
  subscriptionDeliveriesWaiting.set(row?.waiting ?? 0);
  subscriptionBacklog.set(Math.max(0, row?.due_seconds ?? 0));
}

function formatDuration(seconds: number): string {
  if (seconds % 86400 === 0) return `${seconds / 86400} day${seconds === 86400 ? "" : "s"}`;
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  return `${seconds} s`;
}
