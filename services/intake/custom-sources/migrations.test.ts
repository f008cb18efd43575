import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshDatabase } from "../../../test/support/app.js";
import { migrate } from "../../runtime/data/migrations.js";
import { migrations } from "../migrations.js";
import { createDeliveryRecordStore, KEPT_DELIVERIES, KEPT_PAYLOADS } from "./store.js";

/**
 * Upgrading a database the earlier schema wrote: migration 36 turns each custom source's kept
 * payloads and delivery log, rows added and trimmed, into rings of slots, keeping the newest of
 * each and numbering them so that the next delivery follows on.
 */

let database: Awaited<ReturnType<typeof freshDatabase>>;
let sql: postgres.Sql;

beforeAll(async () => {
  database = await freshDatabase();
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await sql?.end();
  await database?.drop();
});

describe("migration 36 on an existing database", () => {
  it("keeps each source's newest payloads and log rows, numbered in order, and the next record follows them", async () => {
    await migrate(
      sql,
      "intake",
      migrations.filter((m) => m.id < 36),
    );
    const source = async (name: string) => {
      const id = randomUUID();
      await sql`insert into intake.custom_sources (id, org_id, org_slug, name, rules) values (${id}, ${randomUUID()}, 'acme', ${name}, '[]')`;
      return id;
    };
    const busy = await source("busy");
    const quiet = await source("quiet");
    const empty = await source("empty");
    // What the earlier schema held: more rows than kept (a trim had not run yet), in time order.
    const payloads = KEPT_PAYLOADS + 12;
    const deliveries = KEPT_DELIVERIES + 30;
    await sql`
      insert into intake.custom_source_payloads (id, source_id, received_at, body, headers, query, truncated)
      select gen_random_uuid(), ${busy}, timestamptz '2026-11-01' + n * interval '1 second', jsonb_build_object('n', n), '{}', '{}', false
      from generate_series(0, ${payloads - 1}) n`;
    await sql`
      insert into intake.custom_source_deliveries (id, source_id, at, outcome, warnings)
      select gen_random_uuid(), ${busy}, timestamptz '2026-11-01' + n * interval '1 second', 'opened', array['w' || n]
      from generate_series(0, ${deliveries - 1}) n`;
    await sql`insert into intake.custom_source_payloads (id, source_id, body, headers, query, truncated) values (gen_random_uuid(), ${quiet}, '{"n": 0}', '{}', '{}', false)`;
    await sql`insert into intake.custom_source_deliveries (id, source_id, outcome) values (gen_random_uuid(), ${quiet}, 'attached')`;

    await migrate(sql, "intake", migrations);

    const store = createDeliveryRecordStore(sql);
    const kept = await store.payloads(busy);
    expect(kept.map((p) => (p.body as { n: number }).n)).toEqual(Array.from({ length: KEPT_PAYLOADS }, (_, i) => payloads - 1 - i));
    expect(kept.map((p) => p.seq)).toEqual(Array.from({ length: KEPT_PAYLOADS }, (_, i) => String(KEPT_PAYLOADS - 1 - i)));
    const log = await store.deliveries(busy);
    expect(log.map((d) => d.warnings[0])).toEqual(Array.from({ length: KEPT_DELIVERIES }, (_, i) => `w${deliveries - 1 - i}`));
    expect((await store.deliveries(quiet)).map((d) => [d.seq, d.outcome])).toEqual([["0", "attached"]]);
    expect(await store.payloads(empty)).toEqual([]);

    // The next delivery is the newest, and overwrites the oldest kept.
    await store.keepAndLogMany([
      {
        sourceId: busy,
        receivedAt: new Date(),
        payload: { body: { n: "next" }, headers: {}, query: {}, truncated: false },
        entry: { outcome: "recorded", warnings: [] },
      },
      {
        sourceId: empty,
        receivedAt: new Date(),
        payload: { body: { n: "first" }, headers: {}, query: {}, truncated: false },
        entry: { outcome: "opened", warnings: [] },
      },
    ]);
    const after = await store.payloads(busy);
    expect(after).toHaveLength(KEPT_PAYLOADS);
    expect(after[0]).toMatchObject({ seq: String(KEPT_PAYLOADS), body: { n: "next" } });
    expect(after.at(-1)!.body).toEqual({ n: payloads - KEPT_PAYLOADS + 1 });
    expect((await store.deliveries(busy))[0]).toMatchObject({ seq: String(KEPT_DELIVERIES), outcome: "recorded" });
    expect((await store.payloads(empty)).map((p) => p.seq)).toEqual(["0"]);
  });
});
