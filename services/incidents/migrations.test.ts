import { create } from "@bufbuild/protobuf";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshDatabase } from "../../test/support/app.js";
import { RecordRequestSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { loadConfig } from "../runtime/config/config.js";
import { migrate } from "../runtime/data/migrations.js";
import { migrations } from "./migrations.js";
import { createRecordHandlers } from "./record.js";
import { createRecordBatch } from "./record-many.js";

/**
 * Upgrading a database the earlier schema wrote: migration 4 replaces the partial unique index on
 * open incidents' identity by `open_identity` and its unique index, on the rows already there;
 * migration 6 makes the timeline entries, not a table of their own, hold event identifiers.
 */

let database: Awaited<ReturnType<typeof freshDatabase>>;
let sql: postgres.Sql;
const ORG = "7b1c3a52-0c43-4a53-9b5b-6d1f0c7e2a11";

beforeAll(async () => {
  database = await freshDatabase();
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await sql?.end();
  await database?.drop();
});

describe("migration 4 on an existing database", () => {
  it("keeps one open incident per identity, resolved ones aside, and the next insert of an open identity conflicts", async () => {
    await migrate(
      sql,
      "incidents",
      migrations.filter((m) => m.id < 4),
    );
    const insert = (identity: string | null, state: string) => sql`
      insert into incidents.incidents (org_id, title, severity, source, attach_identity, state)
      values (${ORG}, 'Disk full', 'sev2', 'metrics-monitor', ${identity}, ${state}) returning id`;
    // What the earlier schema allowed: one open and any number of resolved per identity, and
    // incidents without an identity.
    await insert("metrics-monitor:a", "resolved");
    await insert("metrics-monitor:a", "archived");
    const [open] = await insert("metrics-monitor:a", "open");
    await insert(null, "open");
    await insert(null, "open");

    await migrate(sql, "incidents", migrations);

    const rows = await sql<{ id: string; state: string; open_identity: string | null }[]>`
      select id, state, open_identity from incidents.incidents where attach_identity = 'metrics-monitor:a' order by state`;
    expect(rows.map((r) => [r.state, r.open_identity])).toEqual([
      ["archived", null],
      ["open", "metrics-monitor:a"],
      ["resolved", null],
    ]);
    const [found] = await sql<{ id: string }[]>`
      select id from incidents.incidents where org_id = ${ORG} and open_identity = 'metrics-monitor:a'`;
    expect(found!.id).toBe(open!.id);
    // A second open incident of the identity is what the index refuses; resolving the first frees it.
    const conflict = await sql`
      insert into incidents.incidents (org_id, title, severity, source, attach_identity)
      values (${ORG}, 'Disk full', 'sev2', 'metrics-monitor', 'metrics-monitor:a')
      on conflict (org_id, open_identity) do nothing returning id`;
    expect(conflict).toHaveLength(0);
    await sql`update incidents.incidents set state = 'resolved' where id = ${open!.id}`;
    const reopened = await sql`
      insert into incidents.incidents (org_id, title, severity, source, attach_identity)
      values (${ORG}, 'Disk full', 'sev2', 'metrics-monitor', 'metrics-monitor:a')
      on conflict (org_id, open_identity) do nothing returning id`;
    expect(reopened).toHaveLength(1);
    const [index] = await sql<{ indexes: string[] }[]>`
      select array_agg(indexname::text order by indexname) as indexes from pg_indexes where schemaname = 'incidents' and tablename = 'incidents'`;
    expect(index!.indexes).toContain("incidents_one_open_identity");
    expect(index!.indexes).not.toContain("incidents_one_open_per_identity");
  });
});

describe("migration 6 on an existing database", () => {
  it("keeps an event identifier recorded before the upgrade recorded once, on both paths of Record", async () => {
    await sql`drop schema incidents cascade`;
    await migrate(
      sql,
      "incidents",
      migrations.filter((m) => m.id < 6),
    );
    // What the earlier code wrote for one delivery: the incident, its held identifier and its entry.
    const [incident] = await sql<{ id: string }[]>`
      insert into incidents.incidents (org_id, title, severity, source, attach_identity)
      values (${ORG}, 'Disk full', 'sev2', 'metrics-monitor', 'metrics-monitor:held') returning id`;
    await sql`insert into incidents.held_event_ids (incident_id, event_id) values (${incident!.id}, 'before-upgrade')`;
    await sql`insert into incidents.timeline_entries (incident_id, kind, event_id) values (${incident!.id}, 'opened', 'before-upgrade')`;

    await migrate(sql, "incidents", migrations);

    const config = loadConfig({ ...process.env, DATABASE_URL: database.url });
    const { record } = createRecordHandlers({ sql, config, outbox: { poke() {} } });
    const batch = createRecordBatch({ sql, config, outbox: { write: async () => {}, writeMany: async () => {}, poke() {} } });
    const delivery = (eventId: string) =>
      create(RecordRequestSchema, {
        orgId: ORG,
        orgSlug: "acme",
        alert: { source: "metrics-monitor", kind: "alert", attachIdentity: "metrics-monitor:held", eventId, title: "Disk full", severity: "sev2" },
      });
    // The single statement and the batch statements both find the identifier already recorded.
    expect(await record(delivery("before-upgrade"))).toMatchObject({
      outcome: "attached",
      reason: "this event identifier is already recorded on the open incident",
    });
    const decided = new Map();
    await batch([delivery("before-upgrade"), delivery("after-upgrade")], decided);
    expect([...decided.values()].map((answer) => [answer.outcome, answer.reason])).toEqual([
      ["attached", "this event identifier is already recorded on the open incident"],
      ["attached", undefined],
    ]);
    expect((await record(delivery("after-upgrade"))).reason).toBe("this event identifier is already recorded on the open incident");
    const entries = await sql<{ event_id: string }[]>`select event_id from incidents.timeline_entries where incident_id = ${incident!.id} order by id`;
    expect(entries.map((e) => e.event_id)).toEqual(["before-upgrade", "after-upgrade"]);
  });
});
