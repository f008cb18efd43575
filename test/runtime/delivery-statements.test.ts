import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REVOCABLE_CACHE_TTL_MS } from "../../services/runtime/credentials/revocable-cache.js";
import { fixture, issueCredentials, postTrigger, unique, type Credentials } from "../e2e/triggers-kit.js";
import { OWNER, startApp, type TestApp } from "../support/app.js";
import { startPrivatePostgres, type PrivatePostgres } from "../support/postgres-server.js";

/**
 * What one delivery costs the database, whole: every statement of every service, counted by
 * `pg_stat_statements` over a burst of deliveries to `POST /triggers`. An organization that
 * configured none of the optional features (custom sources, grouping overrides, subscriptions,
 * remote-source investigations, escalation, correlation) must pay for none of them: the statements
 * that run once per delivery are the intake's and the incident core's own, and nothing else.
 */

let pg: PrivatePostgres;
let admin: postgres.Sql;
/** On the app's database: the outbox the warm-up filled. */
let appSql: postgres.Sql;
let app: TestApp;
let credentials: Credentials;

const DATABASE = "delivery_statements";
const DELIVERIES = 40;

beforeAll(async () => {
  pg = await startPrivatePostgres({ settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "top" } });
  admin = postgres(pg.url, { max: 1, onnotice: () => {} });
  await admin`create extension if not exists pg_stat_statements`;
  await admin.unsafe(`create database ${DATABASE}`);
  const url = new URL(pg.url);
  url.pathname = `/${DATABASE}`;
  app = await startApp({ databaseUrl: url.toString() });
  appSql = postgres(url.toString(), { max: 1, onnotice: () => {} });
  credentials = await issueCredentials(app);
}, 240_000);

afterAll(async () => {
  await app?.stop();
  await appSql?.end();
  await admin?.end();
  await pg?.cleanup();
});

interface Counted {
  query: string;
  calls: number;
}

/** Statements of the app's database with their calls since the last reset. */
async function statements(): Promise<Counted[]> {
  return admin<Counted[]>`
    select left(regexp_replace(s.query, '\\s+', ' ', 'g'), 160) as query, sum(s.calls)::int as calls
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = ${DATABASE}
    group by 1 order by 2 desc`;
}

/** A metrics-monitor alert, new each call unless `alertId` repeats one. */
function alertBody(alertId = unique("alert")) {
  return { ...fixture("datadog/custom-body-triggered.json"), alert_id: alertId, event_id: unique("event") };
}

/**
 * The relays' own statements: each schema's relay takes its lease and reads due rows on a timer
 * (four times a second) whether or not anything was delivered, and deletes what it published.
 */
const RELAY_STATEMENTS = /outbox_relay_lease|^delete from \w+\.outbox |^vacuum /;

/**
 * The investigation worker's own timer: it looks for due investigations once a second whether or
 * not anything was delivered (remotesource/investigation.ts). Deliveries must not add to it. Its
 * constants are shown as written, or as parameters when the statement was first parsed after the reset.
 */
const INVESTIGATOR_POLL = /^update remotesource\.investigations i set state = ('running'|\$\d+), attempts = i\.attempts \+ (1|\$\d+), claimed_until/;
const INVESTIGATOR_POLL_MS = 1_000;

interface Burst {
  /** Every statement but the relays'. */
  counted: Counted[];
  /** How long the measured deliveries, and the consumers after them, took. */
  ms: number;
}

/** The statements a burst of deliveries ran (and the consumers of their events), besides the relays'. */
async function burst(send: () => Promise<void>): Promise<Burst> {
  const drained = () => expect.poll(async () => (await appSql`select 1 from incidents.outbox limit 1`).length).toBe(0);
  for (let i = 0; i < 3; i++) await send(); // prepares each statement on the pool's connections
  // Nothing of the warm-up left for the relays and the consumers to do.
  await drained();
  // The consumers' groups of the warm-up's events are done too (they run after the outbox row is gone).
  await new Promise((resolve) => setTimeout(resolve, 500));
  await admin`select pg_stat_statements_reset()`;
  const started = Date.now();
  for (let i = 0; i < DELIVERIES; i++) await send();
  // The events have reached every consumer: what they cost is counted with the deliveries.
  await drained();
  await new Promise((resolve) => setTimeout(resolve, 500));
  const ms = Date.now() - started;
  const counted = await statements();
  console.log(`statements over ${DELIVERIES} deliveries (${ms} ms):\n${counted.map((s) => `${String(s.calls).padStart(6)}  ${s.query}`).join("\n")}`);
  return { counted: counted.filter((s) => !RELAY_STATEMENTS.test(s.query)), ms };
}

/**
 * The subscriptions fan-out's statements over the burst's events: the match of events to
 * subscriptions, and the lookup of whether the organization has any (answered from a cache once
 * the warm-up asked it). The delivery worker's timer statements are not the deliveries' cost.
 */
function fanOutStatements(counted: Counted[]): Counted[] {
  return counted.filter((s) => /subscriptions\.subscriptions/.test(s.query) && (/unnest/.test(s.query) || /where org_id = \$1 limit/.test(s.query)));
}

/**
 * The remote-source service's statements over the burst, but for the investigation worker's timer:
 * an organization without an investigation read pays none (no recording of a due investigation,
 * no lookup of its reads once the warm-up asked), and the timer is not poked.
 */
function remoteSourceStatements({ counted, ms }: Burst): Counted[] {
  const polls = counted.filter((s) => INVESTIGATOR_POLL.test(s.query)).reduce((n, s) => n + s.calls, 0);
  // At most one look per poll interval (and one more for the interval the burst began in).
  expect(polls, "the investigation worker was poked by the deliveries").toBeLessThanOrEqual(Math.ceil(ms / INVESTIGATOR_POLL_MS) + 1);
  return counted.filter((s) => /remotesource\./.test(s.query) && !INVESTIGATOR_POLL.test(s.query));
}

/**
 * Look-ups of `table` over the burst beyond what the cache's backstop expiry allows: an
 * organization without correlation settings or grouping overrides has its empty answer cached until
 * a change is broadcast, so the burst reads them again only if that expiry passed during it.
 */
function lookupsPastExpiry({ counted, ms }: Burst, table: string): number {
  const lookups = counted.filter((s) => s.query.includes(`from ${table}`)).reduce((n, s) => n + s.calls, 0);
  return Math.max(0, lookups - Math.floor(ms / REVOCABLE_CACHE_TTL_MS));
}

/** Correlation's statements over the burst, but its settings' look-ups (counted apart): no group claimed. */
function correlationStatements({ counted }: Burst): Counted[] {
  return counted.filter((s) => /intake\.correlation_/.test(s.query) && !/from intake\.correlation_settings/.test(s.query));
}

/** What an organization that set neither correlation nor grouping overrides pays for them over the burst. */
function expectNoCorrelationOrGrouping(measured: Burst): void {
  expect(correlationStatements(measured)).toEqual([]);
  expect(lookupsPastExpiry(measured, "intake.correlation_settings")).toBe(0);
  expect(lookupsPastExpiry(measured, "intake.grouping_overrides")).toBe(0);
}

/** Statements per delivery, from those that ran at least once per delivery. */
function perDelivery(counted: Counted[]): number {
  return counted.filter((s) => s.calls >= DELIVERIES).reduce((n, s) => n + Math.round(s.calls / DELIVERIES), 0);
}

describe("what a delivery costs an organization that configured nothing optional", () => {
  it("opening an incident costs one statement of the incident core, and none of the subscriptions fan-out, investigations, correlation or grouping overrides", async () => {
    const measured = await burst(async () => {
      const res = await postTrigger(app, credentials.ingestToken, alertBody());
      expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
    });
    expect(perDelivery(measured.counted)).toBe(1);
    // No subscription: the fan-out asks nothing of the database (subscriptions/fan-out.ts).
    expect(fanOutStatements(measured.counted)).toEqual([]);
    // No investigation read: opened incidents record no due investigation (remotesource/investigation.ts).
    expect(remoteSourceStatements(measured)).toEqual([]);
    // No correlation settings, no grouping override: the empty answers are cached until a change,
    // and no group is claimed or read (intake/correlation/correlation.ts, intake/grouping/grouping.ts).
    expectNoCorrelationOrGrouping(measured);
  });

  it("a repeat on an open incident costs the same one statement", async () => {
    const alertId = unique("alert");
    const measured = await burst(async () => {
      const res = await postTrigger(app, credentials.ingestToken, alertBody(alertId));
      expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
    });
    expect(perDelivery(measured.counted)).toBe(1);
    expect(fanOutStatements(measured.counted)).toEqual([]);
    expect(remoteSourceStatements(measured)).toEqual([]);
    expectNoCorrelationOrGrouping(measured);
  });

  it("deliveries that arrive together after a change to the correlation settings share one look-up", async () => {
    await postTrigger(app, credentials.ingestToken, alertBody());
    // Set and removed again: the organization has no settings, and every copy of them was dropped.
    const put = await app.call("PUT", `/o/${OWNER.org}/correlation`, { token: credentials.owner, body: { mode: "link" } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect((await app.call("DELETE", `/o/${OWNER.org}/correlation`, { token: credentials.owner })).status).toBe(204);
    await admin`select pg_stat_statements_reset()`;
    const answers = await Promise.all(Array.from({ length: 30 }, () => postTrigger(app, credentials.ingestToken, alertBody())));
    for (const res of answers) expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
    const lookups = (await statements()).filter((s) => /from intake\.correlation_settings/.test(s.query)).reduce((n, s) => n + s.calls, 0);
    expect(lookups).toBe(1);
  });
});
