import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshDatabase } from "../../../test/support/app.js";
import { openDatabase, openPoolOn, type Database, type Sql, type TransactionSql } from "./database.js";
import { createLogger } from "../observability/logger.js";

// The pools' settings, read back from a real Postgres server.

let database: { url: string; drop(): Promise<void> };
let db: Database;

beforeAll(async () => {
  database = await freshDatabase();
  db = await openDatabase({ url: database.url, dataDir: "", poolSize: 1 }, createLogger("silent", "test"));
});

afterAll(async () => {
  await db?.close();
  await database?.drop();
});

/** Whether Postgres compiled the statement's plan to machine code (JIT) when it ran it. */
async function jitCompiled(sql: Sql | TransactionSql, query: string): Promise<boolean> {
  const [row] = await sql.unsafe(`explain (analyze, format json) ${query}`);
  return "JIT" in (row!["QUERY PLAN"] as Record<string, unknown>[])[0]!;
}

describe("a pool that keeps its plans", () => {
  it("never compiles a plan to machine code, though sequential scans are costed out of reach", async () => {
    const kept = openPoolOn(db, 1, "warroom-test-kept", "kept, by index");
    try {
      // postgres.js's own query for array types, which it runs on every new connection: with
      // sequential scans off its cost passes jit_above_cost, and compiling it took 106 ms of the
      // 125 ms a new connection took, on a server with JIT.
      const arrayTypes = `select b.oid, b.typarray from pg_catalog.pg_type a left join pg_catalog.pg_type b on b.oid = a.typelem
        where a.typcategory = 'A' group by b.oid, b.typarray order by b.oid`;
      expect(await jitCompiled(kept, arrayTypes)).toBe(false);
      // The same query with sequential scans off and JIT left on is compiled, on a server that
      // can (Debian's packages, as in CI): the check above is not true by default.
      const [{ available }] = await db.sql<[{ available: boolean }]>`select pg_jit_available() as available`;
      if (available) {
        await db.sql.begin(async (tx) => {
          await tx`set local enable_seqscan = off`;
          expect(await jitCompiled(tx, arrayTypes)).toBe(true);
        });
      }
    } finally {
      await kept.end();
    }
  });
});
