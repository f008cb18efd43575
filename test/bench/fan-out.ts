import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { createClients } from "../../services/runtime/transport/clients.js";
import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { createSubscriptionEgress, postSigned, type AttemptResult } from "../../services/subscriptions/send.js";
import { webhookIdFor } from "../../services/subscriptions/signing.js";
import { startWebhookReceiver, type WebhookReceiver } from "../../services/subscriptions/testing/webhook-receiver.js";
import { makeTestCertificates, type TestCertificates } from "../support/https-receiver.js";
import { startApp } from "../support/app.js";
import { startPrivatePostgres } from "../support/postgres-server.js";
import { printTable } from "./stats.js";

/**
 * Subscription fan-out, two designs under the same storm: EVENTS incidents opened, three
 * subscriptions to incident.opened, one receiver down (connections dropped) for the whole retry
 * schedule, on a Postgres of its own with pg_stat_statements.
 *
 * rows: the service as it is. The fan-out writes one delivery row per subscription per event, in
 *   groups of up to 100 events off the delivery path; the worker claims rows and settles each
 *   attempt, and every delivery to the down receiver walks the retry schedule on its own.
 * cursor: a prototype in this file only, fed the same event bodies in the same groups: one row per
 *   event in an event log, and per subscription a cursor (the last event sent, its failures, when
 *   to try next) claimed under a lease, so replicas share it as they share the rows' claims. A
 *   healthy subscription reads the events past its cursor 64 at a time, posts them
 *   SUBSCRIPTION_CONCURRENCY at a time, and writes their attempts and its new cursor in one
 *   statement. A failing one is probed with its oldest event alone, on the subscription's schedule;
 *   once the schedule is spent it gives up the events queued by then in one statement.
 *
 * The schedule is the production one compressed (SCHEDULE), so both designs spend it in seconds.
 * Prints, per design: Postgres statements, rows, execution time and WAL bytes per event of the
 * subscriptions' own statements (pg_stat_statements; the incident core's and the schema's outbox
 * relay's left out), the posts made
 * to the down receiver, and when the healthy receivers had every event and when the down one's
 * deliveries were all settled.
 */
const EVENTS = Number(process.env.FAN_OUT_BENCH_EVENTS ?? 1000);
const SCHEDULE = "0.25,0.5,1,2";
const CONCURRENCY = 4;
const GROUP = 100;
const BATCH = 64;
const LEASE_MS = 15_000;
const TICK_MS = 250;
/** Marks the bench's own polls, left out of the designs' costs. */
const OWN = "fan-out bench poll";

interface Cost {
  design: string;
  statements: number;
  rows: number;
  execMs: number;
  walBytes: number;
  downPosts: number;
  healthySeconds: number;
  settledSeconds: number;
}

export async function benchFanOut(): Promise<void> {
  const server = await startPrivatePostgres({ settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "all" } });
  const admin = postgres(server.url, { max: 1, onnotice: () => {} });
  const certs = makeTestCertificates();
  const receiver = await startWebhookReceiver(certs);
  try {
    await admin`create extension if not exists pg_stat_statements`;
    const table: Record<string, string | number>[] = [];
    for (const down of [false, true]) {
      const scenario = down ? "one receiver down" : "all receivers up";
      const rows = await rowsDesign(server.url, admin, certs, receiver, down);
      const cursor = await cursorDesign(server.url, admin, certs, receiver, rows.bodies, rows.stormSeconds, down);
      const perEvent = (c: Cost) => ({
        scenario,
        design: c.design,
        "statements per event": (c.statements / EVENTS).toFixed(2),
        "rows per event": (c.rows / EVENTS).toFixed(2),
        "Postgres ms per event": (c.execMs / EVENTS).toFixed(4),
        "WAL bytes per event": Math.round(c.walBytes / EVENTS),
        "posts to the down receiver": down ? c.downPosts : "",
        "healthy had every event, s after the storm": c.healthySeconds.toFixed(1),
        "every delivery settled, s after the storm": c.settledSeconds.toFixed(1),
      });
      table.push(perEvent(rows.cost), perEvent(cursor), {
        scenario,
        design: "cursor / rows",
        "statements per event": (cursor.statements / rows.cost.statements).toFixed(2),
        "Postgres ms per event": (cursor.execMs / rows.cost.execMs).toFixed(2),
        "WAL bytes per event": (cursor.walBytes / rows.cost.walBytes).toFixed(2),
      });
    }
    printTable(
      `Subscription fan-out under a storm of ${EVENTS} events, three subscriptions, all up or one down through the whole schedule (${SCHEDULE} s); the subscriptions' statements only`,
      table,
    );
  } finally {
    await receiver.close();
    certs.remove();
    await admin.end();
    await server.cleanup();
  }
}

/** The statements whose text names `schema`, since the last reset: calls, rows, time and WAL. */
async function statementCost(admin: postgres.Sql, schema: string) {
  const theirs = admin`query like ${`%${schema}.%`} and query not like ${`%${schema}.outbox%`} and query not like ${`%${OWN}%`}
    and query not like '%pg_stat_statements%'`;
  const [row] = await admin<Pick<Cost, "statements" | "rows" | "execMs" | "walBytes">[]>`
    select coalesce(sum(calls), 0)::float8 as statements, coalesce(sum(rows), 0)::float8 as rows,
           coalesce(sum(total_exec_time), 0)::float8 as "execMs", coalesce(sum(wal_bytes), 0)::float8 as "walBytes"
    from pg_stat_statements where ${theirs}`;
  const top = await admin<{ statement: string; calls: number; rows: number; ms: number; wal: number }[]>`
    select left(regexp_replace(query, '[[:space:]]+', ' ', 'g'), 90) as statement, calls::int, rows::int, round(total_exec_time::numeric, 1)::float8 as ms, wal_bytes::float8 as wal
    from pg_stat_statements where ${theirs}
    order by total_exec_time desc limit 6`;
  printTable(`${schema}: the statements that took longest`, top);
  return row!;
}

async function until(done: () => Promise<boolean> | boolean, timeoutMs = 300_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await done())) {
    if (performance.now() > deadline) throw new Error("the storm did not settle in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The down receiver's behaviour: it drops each connection before it records a post, so they are counted here. */
function countingDrops() {
  let count = 0;
  const behaviour = () => {
    count++;
    return "drop" as const;
  };
  return { behaviour, count: () => count };
}

const accepted = (receiver: WebhookReceiver, name: string) => receiver.acceptedIds(name).size;

/** The service as it is: the storm through the incident core, its events fanned out into rows. */
async function rowsDesign(databaseUrl: string, admin: postgres.Sql, certs: TestCertificates, receiver: WebhookReceiver, down: boolean) {
  const app = await startApp({
    databaseUrl,
    env: {
      SECRETS_KEYS: newSecretKeyEntry("k1"),
      EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
      EGRESS_CA_FILE: certs.caFile,
      SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: SCHEDULE,
      LOG_LEVEL: "warn",
    },
  });
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  try {
    const clients = createClients(app.process.transport);
    const orgId = (await clients.identity.getOrganization({ slug: "acme" })).id;
    const owner = await app.ownerToken();
    await app.call("PUT", "/o/acme/oncall/egress", { token: owner, body: { enabled: true } });
    const drops = countingDrops();
    const [a, b, c] = ["a", "b", "c"].map((x) => `rows-${down ? "down" : "up"}-${x}`) as [string, string, string];
    for (const name of [a, b, c]) {
      receiver.endpoint(name, [], down && name === c ? drops.behaviour : () => ({ status: 204 }));
      const res = await app.call("POST", "/o/acme/subscriptions", { token: owner, body: { url: receiver.url(name), events: ["incident.opened"] } });
      receiver.setSecrets(name, [res.body.secret]);
    }
    const run = randomBytes(4).toString("hex");
    await admin`select pg_stat_statements_reset()`;
    let i = 0;
    const stormStart = performance.now();
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (i < EVENTS) {
          const n = i++;
          await clients.incidents.record({
            orgId,
            orgSlug: "acme",
            alert: { source: "metrics-monitor", attachIdentity: `storm-${run}-${n}`, kind: "alert", title: `storm ${n}`, severity: "sev3", summary: "" },
          });
        }
      }),
    );
    const stormEnd = performance.now();
    await until(() => accepted(receiver, a) >= EVENTS && accepted(receiver, b) >= EVENTS);
    const healthySeconds = (performance.now() - stormEnd) / 1000;
    await until(async () => {
      const [left] = await sql<
        { n: number }[]
      >`select count(*)::int as n from subscriptions.deliveries where state in ('pending', 'delivering') /* ${sql.unsafe(OWN)} */`;
      return left!.n === 0;
    });
    const settledSeconds = (performance.now() - stormEnd) / 1000;
    const cost = await statementCost(admin, "subscriptions");
    // The bodies the healthy receivers got, for the cursor design to send the same.
    const bodies = (
      await sql<{ payload: string }[]>`
        select d.payload from subscriptions.deliveries d join subscriptions.subscriptions s on s.id = d.subscription_id
        where s.url = ${receiver.url(a)} order by d.created_at, d.id`
    ).map((r) => r.payload);
    // The next scenario's app shares this database: it starts with no subscription.
    await sql`delete from subscriptions.deliveries`;
    await sql`delete from subscriptions.subscriptions`;
    return {
      stormSeconds: (stormEnd - stormStart) / 1000,
      bodies,
      cost: { design: "rows (the service)", ...cost, downPosts: drops.count(), healthySeconds, settledSeconds } satisfies Cost,
    };
  } finally {
    await sql.end();
    await app.stop();
  }
}

const SCHEMA = `
  create schema fanout_cursor;
  create table fanout_cursor.events (seq bigserial primary key, org_id uuid not null, type text not null, payload text not null, at timestamptz not null default now());
  create index events_org on fanout_cursor.events (org_id, seq);
  create table fanout_cursor.cursors (
    subscription_id text primary key, org_id uuid not null, events text[] not null,
    sent_seq bigint not null default 0, failures int not null default 0,
    next_attempt_at timestamptz not null default now(), claimed_until timestamptz);
  create table fanout_cursor.attempts (
    id bigserial primary key, subscription_id text not null, event_seq bigint not null, status int not null,
    latency_ms int not null, outcome text not null, at timestamptz not null default now());`;

/** The cursor design, prototyped: the same bodies, fed in the same groups over the same time. */
async function cursorDesign(
  databaseUrl: string,
  admin: postgres.Sql,
  certs: TestCertificates,
  receiver: WebhookReceiver,
  bodies: string[],
  stormSeconds: number,
  down: boolean,
): Promise<Cost> {
  await admin.unsafe(`drop schema if exists fanout_cursor cascade; ${SCHEMA}`);
  const sql = postgres(databaseUrl, { max: 4, onnotice: () => {} });
  const egress = createSubscriptionEgress({ EGRESS_CA_FILE: certs.caFile, EGRESS_ALLOW_PRIVATE_CIDRS: ["127.0.0.0/8"], SUBSCRIPTION_TIMEOUT_SECONDS: 10 });
  const schedule = SCHEDULE.split(",").map((s) => Number(s) * 1000);
  const orgId = "00000000-0000-4000-8000-000000000001";
  const drops = countingDrops();
  const [a, b, c] = ["a", "b", "c"].map((x) => `cursor-${down ? "down" : "up"}-${x}`) as [string, string, string];
  const subscriptions = [a, b, c].map((name) => {
    const secret = `whsec_${randomBytes(24).toString("base64")}`;
    receiver.endpoint(name, [secret], down && name === c ? drops.behaviour : () => ({ status: 204 }));
    return { id: name, url: receiver.url(name), secrets: [secret] };
  });
  try {
    await sql`insert into fanout_cursor.cursors (subscription_id, org_id, events) select unnest(${subscriptions.map((s) => s.id)}::text[]), ${orgId}, '{incident.opened}'`;
    await admin`select pg_stat_statements_reset()`;
    let stopped = false;
    let fed = false;
    const wake = new Set<() => void>();
    const poke = () => {
      for (const w of wake) w();
    };
    /** One subscription's sender: claim and read in one statement, post, then attempts and cursor in one. */
    const sender = async (sub: (typeof subscriptions)[number]) => {
      while (!stopped) {
        const batch = await sql<{ seq: string; payload: string; sent_seq: string; failures: number }[]>`
          with claimed as (
            update fanout_cursor.cursors set claimed_until = now() + ${`${LEASE_MS} milliseconds`}::interval
            where subscription_id = ${sub.id} and next_attempt_at <= now() and (claimed_until is null or claimed_until < now())
            returning sent_seq, failures, org_id, events)
          select e.seq, e.payload, c.sent_seq, c.failures from claimed c
          join lateral (
            select seq, payload from fanout_cursor.events e
            where e.org_id = c.org_id and e.seq > c.sent_seq and e.type = any(c.events)
            order by seq limit case when c.failures > 0 then 1 else ${BATCH} end) e on true`;
        if (batch.length === 0) {
          // Claimed nothing to send (or not due): let go of the lease, wait for a poke or a tick.
          await sql`update fanout_cursor.cursors set claimed_until = null where subscription_id = ${sub.id} and claimed_until is not null`;
          await new Promise<void>((resolve) => {
            const done = () => {
              wake.delete(done);
              clearTimeout(timer);
              resolve();
            };
            const timer = setTimeout(done, TICK_MS);
            wake.add(done);
          });
          continue;
        }
        const results: AttemptResult[] = new Array(batch.length);
        let next = 0;
        await Promise.all(
          Array.from({ length: Math.min(CONCURRENCY, batch.length) }, async () => {
            for (let k = next++; k < batch.length; k = next++) {
              results[k] = await postSigned(egress, sub.url, sub.secrets, webhookIdFor(sub.id, batch[k]!.seq), batch[k]!.payload);
            }
          }),
        );
        let sent = 0;
        while (sent < batch.length && results[sent]!.ok) sent++;
        // A failure after some were sent is the new oldest event's first; none sent, one more of the same.
        const failures = sent === batch.length ? 0 : sent > 0 ? 1 : batch[0]!.failures + 1;
        const wait = failures === 0 ? 0 : schedule[failures - 1];
        const givingUp = failures > 0 && wait === undefined;
        const lastSent = sent > 0 ? batch[sent - 1]!.seq : batch[0]!.sent_seq;
        // Given up: every event queued by now that the subscription wants, in one statement.
        await sql`
          with attempt as (
            insert into fanout_cursor.attempts (subscription_id, event_seq, status, latency_ms, outcome)
            select ${sub.id}, s, st, l, o
            from unnest(${batch.map((b) => b.seq)}::bigint[], ${results.map((r) => r.status)}::int[], ${results.map((r) => Math.round(r.latencyMs))}::int[],
                        ${results.map((r) => (r.ok ? "delivered" : "failed"))}::text[]) as a(s, st, l, o)
          )
          update fanout_cursor.cursors set
            sent_seq = case when ${givingUp} then (select coalesce(max(seq), sent_seq) from fanout_cursor.events where org_id = cursors.org_id) else ${lastSent}::bigint end,
            failures = case when ${givingUp} then 0 else ${failures} end,
            next_attempt_at = now() + ${`${givingUp ? 0 : (wait ?? 0)} milliseconds`}::interval,
            claimed_until = null
          where subscription_id = ${sub.id}`;
      }
    };
    const senders = subscriptions.map((s) => sender(s));
    // The feed: the bodies in groups, one statement a group, spread over the storm's time.
    const stormStart = performance.now();
    for (let g = 0; g < bodies.length; g += GROUP) {
      const due = stormStart + ((g / GROUP) * stormSeconds * 1000) / Math.ceil(bodies.length / GROUP);
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const group = bodies.slice(g, g + GROUP);
      await sql`insert into fanout_cursor.events (org_id, type, payload) select ${orgId}, 'incident.opened', unnest(${group}::text[])`;
      poke();
    }
    fed = true;
    const stormEnd = performance.now();
    await until(() => accepted(receiver, a) >= bodies.length && accepted(receiver, b) >= bodies.length);
    const healthySeconds = (performance.now() - stormEnd) / 1000;
    await until(async () => {
      const [behind] = await sql<{ n: number }[]>`
        select count(*)::int as n from fanout_cursor.cursors where sent_seq < (select max(seq) from fanout_cursor.events) /* ${sql.unsafe(OWN)} */`;
      return fed && behind!.n === 0;
    });
    const settledSeconds = (performance.now() - stormEnd) / 1000;
    stopped = true;
    poke();
    await Promise.all(senders);
    const cost = await statementCost(admin, "fanout_cursor");
    return { design: "cursor (prototype)", ...cost, downPosts: drops.count(), healthySeconds, settledSeconds };
  } finally {
    egress.close();
    await sql.end();
  }
}
