import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshDatabase } from "../support/app.js";

/**
 * The fixes patches/postgres+3.4.9.patch applies to the driver, each through its upstream issue's
 * deterministic reproduction. Without the patch the first rejects every transaction, and the
 * second and third end the process.
 */
let database: Awaited<ReturnType<typeof freshDatabase>>;
beforeAll(async () => {
  database = await freshDatabase();
});
afterAll(async () => {
  await database?.drop();
});

describe("the patched Postgres driver", () => {
  it("reserves the connection for a transaction even when BEGIN fills the pipeline (porsager/postgres#1189)", async () => {
    // max_pipeline 0 makes every BEGIN the one that fills the pipeline (not in the driver's types).
    const sql = postgres(database.url, { max: 2, onnotice: () => {}, ...({ max_pipeline: 0 } as object) });
    try {
      const [row] = await sql.begin((tx) => tx`select txid_current() as txid, 1 as ok`);
      expect(row?.ok).toBe(1);
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => sql.begin((tx) => tx`select ${i}::int as i`)));
      expect(results.map(([r]) => r?.i)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    } finally {
      await sql.end({ timeout: 2 });
    }
  });

  it("never throws where nothing can catch it when a reserved connection's backend dies (#1208)", async () => {
    const sql = postgres(database.url, { max: 2, onnotice: () => {} });
    const killer = postgres(database.url, { max: 1, onnotice: () => {} });
    const uncaught: unknown[] = [];
    const record = (err: unknown) => uncaught.push(err);
    process.on("uncaughtException", record);
    const settle = (query: PromiseLike<unknown>) =>
      Promise.race([
        Promise.resolve(query).then(
          () => "answered",
          (err: { code?: string }) => `refused ${err.code}`,
        ),
        new Promise((resolve) => setTimeout(() => resolve("no answer"), 2000)),
      ]);
    try {
      const reserved = await sql.reserve();
      const [{ pid }] = (await reserved`select pg_backend_pid() as pid`) as unknown as [{ pid: number }];
      await killer`select pg_terminate_backend(${pid})`;
      expect(await settle(reserved`select 1`)).toMatch(/^refused (ECONNRESET|CONNECTION_CLOSED)$/);
      // Unpatched, this write ran on a connection with no socket from a timer and threw a
      // TypeError that ended the process. sql.begin, which the services use, rejects its
      // transaction when the connection closes; a reserved connection is only for this probe.
      expect(await settle(reserved`select 1`)).not.toBe("answered");
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(uncaught).toEqual([]);
    } finally {
      process.off("uncaughtException", record);
      await killer.end({ timeout: 2 });
      await sql.end({ timeout: 2 });
    }
  });

  it("never rejects unobserved when a new connection's array-type lookup fails (#1192, #1205)", async () => {
    // A 1 ms statement_timeout, set at the startup handshake, cancels the driver's own pg_type
    // query on every new connection: unpatched, that rejection reached nobody and a service
    // process ended with it when Postgres went away under load.
    const sql = postgres(database.url, { max: 1, onnotice: () => {}, connection: { statement_timeout: 1 } });
    const unhandled: unknown[] = [];
    const record = (err: unknown) => unhandled.push(err);
    process.on("unhandledRejection", record);
    try {
      // The first query shares its connection's failure; the ones after it are answered.
      const outcomes = [];
      for (let i = 0; i < 3; i++) {
        outcomes.push(
          await sql`select 1 as ok`.then(
            ([row]) => row?.ok,
            (err: { code?: string }) => err.code,
          ),
        );
      }
      expect(outcomes.slice(1)).toEqual([1, 1]);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", record);
      await sql.end({ timeout: 2 });
    }
  });
});
