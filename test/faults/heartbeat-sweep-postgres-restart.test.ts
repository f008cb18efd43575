import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";
import { startPrivatePostgres, type PrivatePostgres } from "../support/postgres-server.js";

/**
 * Postgres is killed (immediate stop: no checkpoint, clients cut off) while the periodic sweep
 * declares silences and hands them to the incident core, then comes back. Every silent heartbeat
 * must end with exactly one silence and one incident with one entry: none lost, none doubled.
 */

const HEARTBEATS = 400;

let pg: PrivatePostgres;
let app: TestApp;
let sql: postgres.Sql;

beforeAll(async () => {
  pg = await startPrivatePostgres();
  app = await startApp({ databaseUrl: pg.url, env: { HEARTBEAT_SWEEP_SECONDS: "1", DATABASE_POOL_SIZE: "4" } });
  sql = postgres(pg.url, { max: 2, onnotice: () => {}, connect_timeout: 2 });
}, 120_000);

afterAll(async () => {
  await sql?.end({ timeout: 2 }).catch(() => {});
  await app?.stop().catch(() => {});
  await pg?.cleanup();
});

describe("Postgres restart during the heartbeat sweep", () => {
  it("opens exactly one incident per silent heartbeat: 0 lost, 0 doubled", async () => {
    const owner = await app.ownerToken();
    const first = await app.call("POST", "/o/acme/heartbeats", { token: owner, body: { name: "hb-0", expectedIntervalSeconds: 1, graceSeconds: 1 } });
    expect(first.status).toBe(201);
    // The rest in one statement, due together a few seconds from now.
    await sql`
      insert into heartbeats.heartbeats (org_id, org_slug, name, expected_interval_seconds, grace_seconds, deadline)
      select h.org_id, h.org_slug, 'hb-' || i, 1, 1, now() + interval '3 seconds'
      from heartbeats.heartbeats h, generate_series(1, ${HEARTBEATS - 1}) as i where h.name = 'hb-0'`;
    await sql`update heartbeats.heartbeats set deadline = now() + interval '3 seconds' where name = 'hb-0'`;

    // Wait until the sweep is under way (some silences declared, not all delivered), then kill.
    const until = Date.now() + 30_000;
    let state = { silences: 0, delivered: 0 };
    while (Date.now() < until) {
      const [row] = await sql<{ silences: number; delivered: number }[]>`
        select count(*)::int as silences, count(alert_recorded_at)::int as delivered from heartbeats.silences`;
      state = row!;
      // Declared (one statement for the batch), and being handed to the incident core.
      if (state.silences >= HEARTBEATS && state.delivered < HEARTBEATS) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await pg.stop("immediate");
    await new Promise((r) => setTimeout(r, 2_000));
    await pg.start();

    // Until every heartbeat has its incident, or the count has stood still for 5 s: the silences
    // still missing then sit under the lease of a batch the kill cut off, which ends below.
    let counts = { incidents: 0, heartbeats: 0 };
    let stillSince = Date.now();
    const settle = Date.now() + 60_000;
    while (Date.now() < settle && Date.now() - stillSince < 5_000) {
      const before = counts.heartbeats;
      const [row] = await sql<{ incidents: number; heartbeats: number }[]>`
        select count(*)::int as incidents, count(distinct entity_id)::int as heartbeats from incidents.incidents where source = 'heartbeat'`.catch(() => [
        { incidents: 0, heartbeats: 0 },
      ]);
      counts = row!;
      if (counts.heartbeats >= HEARTBEATS) break;
      if (counts.heartbeats !== before) stillSince = Date.now();
      await new Promise((r) => setTimeout(r, 250));
    }
    // A process cut off between Record and marking the batch keeps its lease (120 s): end every
    // lease now, as time would, so that the next sweeps hand those silences over again under the
    // same event ids. They must change nothing.
    // The sweep writes the same rows meanwhile, in its own order: a deadlock aborts one of the two
    // statements, sometimes this one, which is then run again.
    for (let attempt = 1; ; attempt++) {
      try {
        await sql`update heartbeats.silences set claim_until = now() where alert_recorded_at is null`;
        break;
      } catch (err) {
        if ((err as { code?: string }).code !== "40P01" || attempt === 5) throw err;
      }
    }
    // Sweeps (every second) hand them over again; then some more sweeps, which must change nothing.
    // 60 s is a bound that means "never"; it takes a second or two.
    const handedOver = Date.now() + 60_000;
    while (Date.now() < handedOver) {
      const [left] = await sql<{ n: number }[]>`select count(*)::int as n from heartbeats.silences where alert_recorded_at is null`;
      if (left!.n === 0) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    await new Promise((r) => setTimeout(r, 4_000));
    const [final] = await sql<{ silences: number; undelivered: number; incidents: number; found: number; doubled: number; entries: number }[]>`
      select (select count(*)::int from heartbeats.silences) as silences,
             (select count(*)::int from heartbeats.silences where alert_recorded_at is null) as undelivered,
             (select count(*)::int from incidents.incidents where source = 'heartbeat') as incidents,
             (select count(distinct entity_id)::int from incidents.incidents where source = 'heartbeat') as found,
             (select count(*)::int from (select entity_id from incidents.incidents where source = 'heartbeat'
                group by entity_id having count(*) > 1) d) as doubled,
             (select count(*)::int from incidents.timeline_entries t join incidents.incidents i on i.id = t.incident_id
                where i.source = 'heartbeat') as entries`;
    const lost = HEARTBEATS - final!.found;
    console.log(
      `postgres restart during the sweep: killed at ${state.silences} declared / ${state.delivered} delivered; ` +
        `${HEARTBEATS} silent heartbeats, ${final!.silences} silences, ${final!.incidents} incidents, ${final!.entries} entries, found once ${final!.found - final!.doubled}, doubled ${final!.doubled}, lost ${lost}`,
    );
    expect(final).toMatchObject({ silences: HEARTBEATS, undelivered: 0, incidents: HEARTBEATS, found: HEARTBEATS, doubled: 0, entries: HEARTBEATS });
    expect(lost).toBe(0);
  }, 180_000);
});
