import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { createLogger } from "../../runtime/observability/logger.js";
import { customSourceRecordsDropped } from "../../runtime/observability/metrics.js";
import { createRecordWriter } from "./custom-source-delivery.js";
import { createDeliveryRecordStore, type DeliveryRecord, KEPT_DELIVERIES, KEPT_PAYLOADS } from "./store.js";

// The kept payloads and log rows of deliveries answered together, written in groups after their
// answers, on a real database: each source keeps its newest payloads and log rows in rings of
// slots, however many a group brings and however many writers write at once, and one record that
// cannot be written costs no other its row.

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
  // Arrived in the order of their numbers.
  return {
    sourceId,
    receivedAt: new Date(Date.UTC(2026, 10, 28) + n),
    payload: { body: { n }, headers: {}, query: {}, truncated: false },
    entry: { outcome: "opened", warnings: [`w${n}`] },
  };
}

async function keptNumbers(sourceId: string): Promise<number[]> {
  const rows = await sql<{ n: number }[]>`
    select (body->>'n')::int as n from intake.custom_source_payloads where source_id = ${sourceId} order by seq desc`;
  return rows.map((r) => r.n);
}

async function logged(sourceId: string): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from intake.custom_source_deliveries where source_id = ${sourceId}`;
  return row!.n;
}

describe("kept payloads and log rows written together", () => {
  it("keeps each source's newest payloads when one batch brings more than it keeps, and logs every delivery", async () => {
    const store = createDeliveryRecordStore(sql);
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
    const [row] = await sql<{ warnings: string[] }[]>`select warnings from intake.custom_source_deliveries where source_id = ${quiet} order by seq limit 1`;
    expect(row!.warnings).toEqual(["w1000"]);
  });

  it("writes the others of a batch when one record cannot be written (its source deleted meanwhile)", async () => {
    const store = createDeliveryRecordStore(sql);
    const kept = await createSource("batch-kept");
    const gone = await createSource("batch-gone");
    await sql`delete from intake.custom_sources where id = ${gone}`;
    const writer = createRecordWriter(store, createLogger("silent", "test"));
    for (const r of [record(kept, 1), record(kept, 2), record(gone, 3), record(kept, 4)]) writer.write(r);
    await writer.flush();
    expect((await keptNumbers(kept)).sort()).toEqual([1, 2, 4]);
    expect(await logged(kept)).toBe(3);
    expect(await logged(gone)).toBe(0);
  });

  it("writes records after their answers in groups, and a flush ends though more keep coming", async () => {
    const store = createDeliveryRecordStore(sql);
    const source = await createSource("batch-grouped");
    const statements: number[] = [];
    const counted = {
      ...store,
      keepAndLogMany(group: DeliveryRecord[]) {
        statements.push(group.length);
        return store.keepAndLogMany(group);
      },
    };
    const writer = createRecordWriter(counted, createLogger("silent", "test"));
    for (let n = 0; n < 250; n++) writer.write(record(source, n));
    expect(statements).toEqual([100]); // one statement at a time; a full group goes without waiting
    await writer.flush();
    expect(statements).toEqual([100, 100, 50]);
    expect(await logged(source)).toBe(250);

    // A storm of writes never starves a flush: it waits for what was there when it was called.
    let n = 1000;
    const storm = setInterval(() => writer.write(record(source, n++)), 1);
    try {
      await new Promise((r) => setTimeout(r, 30));
      const waitingAtFlush = n - 1000;
      await writer.flush();
      expect(await logged(source)).toBeGreaterThanOrEqual(250 + waitingAtFlush);
    } finally {
      clearInterval(storm);
    }
    await writer.flush();
    expect(await logged(source)).toBe(250 + (n - 1000));
  });

  it("keeps at most its bound waiting while Postgres does not keep up, dropping the oldest and counting them", async () => {
    const store = createDeliveryRecordStore(sql);
    const source = await createSource("batch-bounded");
    const writer = createRecordWriter(store, createLogger("silent", "test"), 20);
    const droppedBefore = (await customSourceRecordsDropped.get()).values[0]?.value ?? 0;
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const locked = new Promise<void>((onLocked) => {
      void sql.begin(async (tx) => {
        await tx`lock table intake.custom_source_deliveries in access exclusive mode`;
        onLocked();
        await held;
      });
    });
    await locked;
    writer.write(record(source, 0));
    await new Promise((r) => setTimeout(r, 60)); // its group is now written, and waits for the lock
    for (let n = 1; n <= 25; n++) writer.write(record(source, n));
    expect(((await customSourceRecordsDropped.get()).values[0]?.value ?? 0) - droppedBefore).toBe(5);
    release();
    await writer.flush();
    expect((await keptNumbers(source)).sort((a, b) => a - b)).toEqual([0, ...Array.from({ length: 20 }, (_, i) => i + 6)]);
    expect(await logged(source)).toBe(21);
  });

  it("keeps a storm's newest payloads and log rows in place: the tables never grow past the rings", async () => {
    const store = createDeliveryRecordStore(sql);
    const source = await createSource("ring-storm");
    const total = 3 * KEPT_DELIVERIES + 7;
    for (let from = 0; from < total; from += 100) {
      await store.keepAndLogMany(Array.from({ length: Math.min(100, total - from) }, (_, i) => record(source, from + i)));
      const [rows] = await sql<{ payloads: number; log: number }[]>`
        select (select count(*)::int from intake.custom_source_payloads where source_id = ${source}) as payloads,
               (select count(*)::int from intake.custom_source_deliveries where source_id = ${source}) as log`;
      expect(rows!.payloads).toBeLessThanOrEqual(KEPT_PAYLOADS);
      expect(rows!.log).toBeLessThanOrEqual(KEPT_DELIVERIES);
    }
    expect(await keptNumbers(source)).toEqual(Array.from({ length: KEPT_PAYLOADS }, (_, i) => total - 1 - i));
    const entries = await store.deliveries(source);
    expect(entries.map((e) => e.warnings[0])).toEqual(Array.from({ length: KEPT_DELIVERIES }, (_, i) => `w${total - 1 - i}`));
    expect(entries[0]!.seq).toBe(String(total - 1));
    const newest = await store.payload(source, BigInt(total - 1));
    expect(newest?.body).toEqual({ n: total - 1 });
    expect(await store.payload(source, BigInt(total - 1 - KEPT_PAYLOADS))).toBeUndefined();
  });

  it("numbers every record once when writers in several replicas write the same sources at once, in any order", async () => {
    const first = await createSource("ring-shared-a");
    const second = await createSource("ring-shared-b");
    // As with many sources, the sources' rows are found by index, in the order the group names them.
    const replicas = Array.from({ length: 4 }, () => postgres(app.databaseUrl, { max: 2, onnotice: () => {}, connection: { enable_seqscan: "off" } }));
    try {
      const groups = 20;
      await Promise.all(
        replicas.map((replica, r) =>
          (async () => {
            const store = createDeliveryRecordStore(replica);
            for (let g = 0; g < groups; g++) {
              // Each group names both sources, in an order that differs between replicas.
              const pair = (r + g) % 2 === 0 ? [first, second] : [second, first];
              await store.keepAndLogMany(pair.flatMap((id) => [record(id, r * 1000 + g * 2), record(id, r * 1000 + g * 2 + 1)]));
            }
          })(),
        ),
      );
      const written = replicas.length * groups * 2;
      for (const source of [first, second]) {
        const [counters] = await sql<{ payload_seq: string; delivery_seq: string }[]>`
          select payload_seq::text, delivery_seq::text from intake.custom_sources where id = ${source}`;
        expect(counters).toEqual({ payload_seq: String(written), delivery_seq: String(written) });
        const seqs = await sql<{ seq: string }[]>`select seq::text from intake.custom_source_deliveries where source_id = ${source}`;
        expect(seqs.map((s) => Number(s.seq)).sort((a, b) => a - b)).toEqual(Array.from({ length: written }, (_, i) => i));
        expect(await keptNumbers(source)).toHaveLength(KEPT_PAYLOADS);
      }
    } finally {
      await Promise.all(replicas.map((replica) => replica.end()));
    }
  });
});
