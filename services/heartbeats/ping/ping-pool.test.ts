import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { castOf, ping, type Cast } from "../testing/kit.js";

// Pings have a connection pool of their own: with every connection of the shared pool (2 here)
// stuck behind a lock, as a stalled sweep, relay or slow incident read would leave them, a ping is
// still answered at once.

let app: TestApp;
let cast: Cast;
let db: postgres.Sql;

beforeAll(async () => {
  app = await startApp({ env: { HEARTBEAT_SWEEP_SECONDS: "3600", DATABASE_POOL_SIZE: "2" } });
  cast = await castOf(app);
  db = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await db?.end();
  await app?.stop();
});

describe("the ping pool", () => {
  it("answers pings while background work holds every connection of the shared pool", async () => {
    expect(
      (await app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { name: "unstarved", expectedIntervalSeconds: 60, graceSeconds: 30 } })).status,
    ).toBe(201);
    // The token is resolved once and then served from the process's cache.
    expect((await ping(app, "unstarved", cast.ingestToken)).status).toBe(204);
    const token = cast.member;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const locked = new Promise<void>((resolveLocked) => {
      void db.begin(async (tx) => {
        await tx`lock table incidents.incidents in access exclusive mode`;
        resolveLocked();
        await released;
      });
    });
    await locked;
    // Four reads of the incident list, each holding a shared connection behind the lock.
    const stuck = Array.from({ length: 4 }, () => app.call("GET", "/o/acme/incidents", { token }));
    // Until two of them wait on the lock (a hang detector bounds the wait: it takes milliseconds).
    const hangAt = Date.now() + 20_000;
    let waiting = 0;
    while (waiting < 2 && Date.now() < hangAt) {
      await new Promise((r) => setTimeout(r, 50));
      [{ n: waiting }] = await db<[{ n: number }]>`
        select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name = 'warroom' and wait_event_type = 'Lock'`;
    }
    expect(waiting).toBe(2);
    // No clock decides it: the ping is answered while the lock is still held, which a ping that
    // needed one of the stuck connections could never be (it would hang until the test times out).
    const answered = await ping(app, "unstarved", cast.ingestToken);
    release();
    expect(answered.status).toBe(204);
    for (const res of await Promise.all(stuck)) expect(res.status).toBe(200);
  });
});
