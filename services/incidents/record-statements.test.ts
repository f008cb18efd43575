import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { AlertSchema, IncidentsService, type Alert } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, startApp, type TestApp } from "../../test/support/app.js";
import { DELIVERY_POOL_SIZE } from "./service.js";
import { startPrivatePostgres, type PrivatePostgres } from "../../test/support/postgres-server.js";

/**
 * What a delivery costs the database: one statement in the common cases (opened, attached,
 * redelivered, recorded, ignored), counted by `pg_stat_statements` on a private Postgres server
 * that loads it (the shared server may not).
 */

let pg: PrivatePostgres;
let admin: postgres.Sql;
let app: TestApp;
let orgId: string;

const DATABASE = "record_statements";

beforeAll(async () => {
  pg = await startPrivatePostgres({ settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "top" } });
  admin = postgres(pg.url, { max: 1, onnotice: () => {} });
  await admin`create extension if not exists pg_stat_statements`;
  await admin.unsafe(`create database ${DATABASE}`);
  app = await startApp({ databaseUrl: appDatabaseUrl() });
  orgId = (await createClient(IdentityService, app.process.transport).getOrganization({ slug: OWNER.org })).id;
});

afterAll(async () => {
  await app?.stop();
  await admin?.end();
  await pg?.cleanup();
});

function appDatabaseUrl(): string {
  const url = new URL(pg.url);
  url.pathname = `/${DATABASE}`;
  return url.toString();
}

/** Opens metrics-monitor incidents `from` to `to`, their identities under `prefix`, in one statement. */
function stormOn(sql: postgres.Sql, prefix: string) {
  return (from: number, to: number) => sql`
    insert into incidents.incidents (org_id, title, severity, source, attach_identity)
    select ${orgId}, 'Storm', 'sev2', 'metrics-monitor', ${prefix} || g from generate_series(${from}::int, ${to}::int) g`;
}

/** The outbox relay's statements: it reads, deletes and vacuums what the deliveries wrote. */
const RELAY_STATEMENTS = ["%published_at%", "delete from incidents.outbox %", "vacuum %incidents.outbox"];

/** Calls of the statements that touch the incident tables, leaving out the outbox relay's. */
async function deliveryStatements(): Promise<number> {
  const [row] = await admin<{ calls: number }[]>`
    select coalesce(sum(s.calls), 0)::int as calls
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = ${DATABASE} and s.query like '%incidents.%' and not s.query like any(${RELAY_STATEMENTS})`;
  return row!.calls;
}

function alert(init: Partial<Alert> & { attachIdentity: string }): Alert {
  return create(AlertSchema, { source: "metrics-monitor", kind: "alert", title: "High CPU on checkout", severity: "sev2", eventId: "", ...init });
}

describe("Record's round trips", () => {
  it("makes one statement per delivery: opened, attached, redelivered, recorded and ignored", async () => {
    const client = createClient(IncidentsService, app.process.transport);
    const record = (a: Alert) => client.record({ orgId, orgSlug: OWNER.org, alert: a });
    const id = `metrics-monitor:statements:${Date.now()}`;
    // Warm up: the first calls on a connection also prepare their statements.
    await record(alert({ attachIdentity: `${id}:warm`, eventId: "w" }));
    await admin`select pg_stat_statements_reset()`;

    const outcomes = [
      (await record(alert({ attachIdentity: id, eventId: "e1" }))).outcome,
      (await record(alert({ attachIdentity: id, eventId: "e2" }))).outcome,
      (await record(alert({ attachIdentity: id, eventId: "e2" }))).outcome,
      (await record(alert({ attachIdentity: id, eventId: "r1", kind: "recovery" }))).outcome,
      (await record(alert({ attachIdentity: `${id}:none`, eventId: "r2", kind: "recovery" }))).outcome,
      (await record(alert({ attachIdentity: "", eventId: "x" }))).outcome,
    ];
    expect(outcomes).toEqual(["opened", "attached", "attached", "recorded", "ignored", "opened"]);
    expect(await deliveryStatements()).toBe(outcomes.length);
  });

  it("decides deliveries that arrive together in a few statements (group commit), each once", async () => {
    const client = createClient(IncidentsService, app.process.transport);
    const record = (a: Alert) => client.record({ orgId, orgSlug: OWNER.org, alert: a });
    const id = `metrics-monitor:grouped:${Date.now()}`;
    await record(alert({ attachIdentity: `${id}:warm`, eventId: "w" }));
    await record(alert({ attachIdentity: `${id}:warm`, eventId: "w2" }));
    await admin`select pg_stat_statements_reset()`;

    // 10 identities × 10 deliveries, one of them a retry of another's event id.
    const deliveries = Array.from({ length: 100 }, (_, k) => alert({ attachIdentity: `${id}:${k % 10}`, eventId: `e${Math.min(Math.floor(k / 10), 8)}` }));
    const answers = await Promise.all(deliveries.map(record));
    const outcomes = answers.map((a) => a.outcome);
    expect(outcomes.filter((o) => o === "opened")).toHaveLength(10);
    expect(outcomes.filter((o) => o === "attached")).toHaveLength(90);
    expect(answers.filter((a) => a.reason?.includes("already recorded"))).toHaveLength(10);
    expect(new Set(answers.map((a) => a.incident?.id)).size).toBe(10);
    expect(await deliveryStatements()).toBeLessThan(deliveries.length / 2);
  });
});

/** Turns pg_stat_statements' count of plans on or off for every session, the app's pooled ones too. */
async function trackPlanning(value: "on" | "off"): Promise<void> {
  await admin.unsafe(`alter system set pg_stat_statements.track_planning = ${value}`);
  await admin`select pg_reload_conf()`;
  // Each session rereads the file before its next statement, once its signal has arrived.
  await new Promise((resolve) => setTimeout(resolve, 300));
}

/** The delivery statements pg_stat_statements has seen (the relay's left out), by calls and plans. */
async function deliveryStatementRows(): Promise<{ query: string; calls: number; plans: number }[]> {
  return admin<{ query: string; calls: number; plans: number }[]>`
    select s.query, s.calls::int as calls, s.plans::int as plans
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = ${DATABASE} and s.query like '%incidents.%' and not s.query like any(${RELAY_STATEMENTS})`;
}

describe("Record's plans", () => {
  it("plans each delivery statement once per connection of its pool, not on every call", async () => {
    const client = createClient(IncidentsService, app.process.transport);
    const record = (a: Alert) => client.record({ orgId, orgSlug: OWNER.org, alert: a });
    const id = `metrics-monitor:plans:${Date.now()}`;
    // Counted for this test only: planning's pages would count in the other tests' buffers.
    await trackPlanning("on");
    try {
      await admin`select pg_stat_statements_reset()`;
      // Alone (Record's single statement) and together (the group's), opening and attaching.
      for (let round = 0; round < 5; round++) {
        expect((await record(alert({ attachIdentity: `${id}:alone`, eventId: `alone-${round}` }))).outcome).toMatch(/opened|attached/);
        const grouped = await Promise.all(Array.from({ length: 20 }, (_, k) => record(alert({ attachIdentity: `${id}:${k}`, eventId: `${round}-${k}` }))));
        expect(grouped.every((a) => a.outcome === (round === 0 ? "opened" : "attached"))).toBe(true);
      }
    } finally {
      await trackPlanning("off");
    }
    const statements = await deliveryStatementRows();
    expect(statements.reduce((sum, s) => sum + s.calls, 0)).toBeGreaterThan(20);
    // Planned on every call, a statement is planned as often as it is called.
    for (const s of statements) expect(s.plans, `${s.calls} calls: ${s.query.replace(/\s+/g, " ").slice(0, 80)}`).toBeLessThanOrEqual(DELIVERY_POOL_SIZE);
  });

  it("keeps plans made on an empty table that read open incidents by their key, windows by organization, nothing whole", async () => {
    const sql = postgres(appDatabaseUrl(), { max: 1, onnotice: () => {} });
    try {
      await admin`select pg_stat_statements_reset()`;
      const client = createClient(IncidentsService, app.process.transport);
      const id = `metrics-monitor:empty-plans:${Date.now()}`;
      await client.record({ orgId, orgSlug: OWNER.org, alert: alert({ attachIdentity: `${id}:alone`, eventId: "a" }) });
      await Promise.all(
        Array.from({ length: 10 }, (_, k) => client.record({ orgId, orgSlug: OWNER.org, alert: alert({ attachIdentity: `${id}:${k}`, eventId: "g" }) })),
      );
      const statements = await deliveryStatementRows();
      expect(statements.length).toBeGreaterThanOrEqual(3);
      // The plan Postgres keeps for a statement planned while the table knows no rows, as the
      // delivery pool's connections plan (database.ts). Every index that starts with the
      // organization would fit a lookup by organization and identity as well as the identity's own.
      await sql`truncate incidents.incidents cascade`;
      await sql.unsafe("set enable_seqscan = off");
      let lookups = 0;
      for (const { query } of statements) {
        const plan = (await sql.unsafe(`explain (generic_plan, costs off) ${query}`)).map((r) => r["QUERY PLAN"] as string).join("\n");
        expect(plan, plan).not.toMatch(/Seq Scan|incidents_org_newest|incidents_org_state_newest|incidents_open_by_source/);
        if (/from incidents\.incidents i\s+where/.test(query) && !/i\.id = any/.test(query)) {
          lookups++;
          expect(plan, plan).toMatch(/incidents_open_key/);
        }
      }
      // The group's probe and Record's own statement each look the open incident up.
      expect(lookups).toBe(2);
    } finally {
      await sql.end();
    }
  });
});

/** Shared buffers the delivery statements touched since the last reset (the relay's left out). */
async function deliveryBuffers(): Promise<number> {
  const [row] = await admin<{ buffers: number }[]>`
    select coalesce(sum(s.shared_blks_hit + s.shared_blks_read), 0)::int as buffers
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = ${DATABASE} and s.query like '%incidents.%' and not s.query like any(${RELAY_STATEMENTS})`;
  return row!.buffers;
}

describe("Record under an alert storm with stale statistics", () => {
  it("costs a delivery the same pages with 20 or 20,000 open incidents: the open incident is found by its identity", async () => {
    const client = createClient(IncidentsService, app.process.transport);
    const record = (a: Alert) => client.record({ orgId, orgSlug: OWNER.org, alert: a });
    const sql = postgres(appDatabaseUrl(), { max: 1, onnotice: () => {} });
    const storm = stormOn(sql, "metrics-monitor:storm:");
    /** Shared buffers per delivery: one alone, then 20 together (group commit), each attaching to a storm incident. */
    const buffersPerDelivery = async (round: string) => {
      await admin`select pg_stat_statements_reset()`;
      expect((await record(alert({ attachIdentity: "metrics-monitor:storm:1", eventId: `${round}-one` }))).outcome).toBe("attached");
      const grouped = await Promise.all(
        Array.from({ length: 20 }, (_, k) => record(alert({ attachIdentity: `metrics-monitor:storm:${1 + k}`, eventId: `${round}-${k}` }))),
      );
      expect(grouped.every((a) => a.outcome === "attached")).toBe(true);
      return (await deliveryBuffers()) / (grouped.length + 1);
    };
    try {
      // A new installation: the statistics last saw a handful of resolved incidents, and the
      // statements were planned while 20 were open; then a storm opened 20,000 more before
      // autovacuum looked again (turned off here, so it never does).
      await sql`alter table incidents.incidents set (autovacuum_enabled = false)`;
      await sql`truncate incidents.incidents cascade`;
      await sql`
        insert into incidents.incidents (org_id, title, severity, source, attach_identity, state, resolved_at)
        select ${orgId}, 'Old', 'sev3', 'metrics-monitor', 'metrics-monitor:old:' || g, 'resolved', now() from generate_series(1, 30) g`;
      await sql`analyze incidents.incidents`;
      await storm(1, 20);
      // Enough rounds for Postgres to settle on a cached plan of each statement.
      for (let round = 0; round < 8; round++) await buffersPerDelivery(`warm-${round}`);
      const small = await buffersPerDelivery("small");
      await storm(21, 20_020);
      const large = await buffersPerDelivery("large");
      // Each delivery writes an entry, a held identifier and an event, with their indexes and
      // foreign keys: a few dozen pages either way (the indexes grow a level deeper meanwhile).
      // Reading every open incident adds hundreds per delivery, growing with the storm.
      expect(large).toBeLessThan(small * 2);
    } finally {
      await sql`alter table incidents.incidents reset (autovacuum_enabled)`;
      await sql.end();
    }
  });
});

describe("FindLatestOpen under a storm of another source", () => {
  it("reads the same pages with 20 or 20,000 open incidents of other sources", async () => {
    const client = createClient(IncidentsService, app.process.transport);
    const sql = postgres(appDatabaseUrl(), { max: 1, onnotice: () => {} });
    const storm = stormOn(sql, "metrics-monitor:other-storm:");
    /** Shared buffers of one lookup of the open PagerDuty incident, opened before the storm. */
    const buffersPerLookup = async () => {
      await admin`select pg_stat_statements_reset()`;
      for (let k = 0; k < 5; k++) {
        expect((await client.findLatestOpen({ orgId, source: "pagerduty-events" })).attachIdentity).toBe("pagerduty-events:dedup:before");
      }
      const [row] = await admin<{ buffers: number }[]>`
        select coalesce(sum(s.shared_blks_hit + s.shared_blks_read), 0)::int as buffers
        from pg_stat_statements s join pg_database d on d.oid = s.dbid
        where d.datname = ${DATABASE} and s.query like 'select id, attach_identity from incidents.incidents%'`;
      return row!.buffers / 5;
    };
    try {
      await sql`
        insert into incidents.incidents (org_id, title, severity, source, attach_identity, opened_at)
        values (${orgId}, 'Change target', 'sev2', 'pagerduty-events', 'pagerduty-events:dedup:before', now() - interval '1 hour')`;
      await storm(1, 20);
      await sql`analyze incidents.incidents`;
      const small = await buffersPerLookup();
      await storm(21, 20_020);
      await sql`analyze incidents.incidents`;
      const large = await buffersPerLookup();
      // An index descent and the incident's page, a level deeper once the storm has grown the
      // index. Walking the organization's open incidents newest first instead reads every storm
      // incident before reaching the PagerDuty one: hundreds of pages.
      expect(small).toBeLessThan(10);
      expect(large).toBeLessThan(10);
    } finally {
      await sql.end();
    }
  });
});
