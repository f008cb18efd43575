import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { AlertSchema, IncidentsService, type Alert } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, startApp, type TestApp } from "../../test/support/app.js";
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
  const url = new URL(pg.url);
  url.pathname = `/${DATABASE}`;
  app = await startApp({ databaseUrl: url.toString() });
  orgId = (await createClient(IdentityService, app.process.transport).getOrganization({ slug: OWNER.org })).id;
}, 60_000);

afterAll(async () => {
  await app?.stop();
  await admin?.end();
  await pg?.cleanup();
});

/** Calls of the statements that touch the incident tables, leaving out the outbox relay's. */
async function deliveryStatements(): Promise<number> {
  const [row] = await admin<{ calls: number }[]>`
    select coalesce(sum(s.calls), 0)::int as calls
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = ${DATABASE} and s.query like '%incidents.%' and s.query not like '%published_at%'`;
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
});
