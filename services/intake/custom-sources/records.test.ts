import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { createLogger } from "../../runtime/logger.js";
import { createRecordWriter } from "./custom-source-delivery.js";
import { createCustomSourceStore, type DeliveryRecord, KEPT_PAYLOADS } from "./store.js";

// The kept payloads and log rows of deliveries answered together, written as one statement (a
// group commit), on a real database: the trim keeps each source's newest payloads, however many a
// batch brings, and one record that cannot be written costs no other its row.

let app: TestApp;
let sql: postgres.Sql;
let owner: string;

beforeAll(async () => {
  app = await startApp();
  owner = await app.ownerToken();
  sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await sql?.end();
  await app?.stop();
});

async function createSource(name: string): Promise<string> {
  const res = await app.call("POST", "/o/acme/custom-sources", { token: owner, body: { name, rules: [{ title: "'t'" }] } });
  expect(res.status).toBe(201);
  return res.body.source.id as string;
}

function record(sourceId: string, n: number): DeliveryRecord {
  return { sourceId, payload: { body: { n }, headers: {}, query: {}, truncated: false }, entry: { outcome: "opened", warnings: [`w${n}`] } };
}

async function keptNumbers(sourceId: string): Promise<number[]> {
  const rows = await sql<{ n: number }[]>`
    select (body->>'n')::int as n from intake.custom_source_payloads where source_id = ${sourceId} order by received_at desc, id desc`;
  return rows.map((r) => r.n);
}

async function logged(sourceId: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from intake.custom_source_deliveries where source_id = ${sourceId}`;
  return row!.n;
}

describe("kept payloads and log rows written together", () => {
  it("keeps each source's newest payloads when one batch brings more than it keeps, and logs every delivery", async () => {
    const store = createCustomSourceStore(sql);
    const busy = await createSource("batch-busy");
    const quiet = await createSource("batch-quiet");
    await store.keepAndLogMany([record(busy, 0), record(busy, 1)]);
    const batch = [...Array.from({ length: KEPT_PAYLOADS + 10 }, (_, i) => record(busy, i + 2)), record(quiet, 1000), record(quiet, 1001)];
    await store.keepAndLogMany(batch);
    const newestFirst = Array.from({ length: KEPT_PAYLOADS }, (_, i) => KEPT_PAYLOADS + 11 - i);
    expect(await keptNumbers(busy)).toEqual(newestFirst);
    expect(await keptNumbers(quiet)).toEqual([1001, 1000]);
    expect(await logged(busy)).toBe(KEPT_PAYLOADS + 12);
    expect(await logged(quiet)).toBe(2);
    const [row] = await sql<{ warnings: string[] }[]>`select warnings from intake.custom_source_deliveries where source_id = ${quiet} order by at limit 1`;
    expect(row!.warnings).toEqual(["w1000"]);
  });

  it("writes the others of a batch when one record cannot be written (its source deleted meanwhile)", async () => {
    const store = createCustomSourceStore(sql);
    const kept = await createSource("batch-kept");
    const gone = await createSource("batch-gone");
    await sql`delete from intake.custom_sources where id = ${gone}`;
    const writer = createRecordWriter(store, createLogger("silent", "test"));
    // Written at once: the first alone, the rest together while it is being written.
    await Promise.all([record(kept, 1), record(kept, 2), record(gone, 3), record(kept, 4)].map((r) => writer.write(r)));
    expect((await keptNumbers(kept)).sort()).toEqual([1, 2, 4]);
    expect(await logged(kept)).toBe(3);
    expect(await logged(gone)).toBe(0);
  });
});
