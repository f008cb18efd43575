import { Code } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorAnswer } from "../../services/gateway/response-rules.js";
import { toConnectError } from "../../services/runtime/errors.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { freshDatabase } from "../support/app.js";

/**
 * Every "try again" condition Postgres reports, produced for real on the test server, is answered
 * as overload: Unavailable with `retry-after` (REST 503 with Retry-After), never a 500. The
 * too-many-clients refusal (53300) through the whole service is in database-refusals.test.ts.
 */

let db: { url: string; drop(): Promise<void> };
let a: postgres.Sql;
let b: postgres.Sql;
const logger = createLogger("silent", "retryable-errors-test");

beforeAll(async () => {
  db = await freshDatabase();
  a = postgres(db.url, { max: 1, onnotice: () => {} });
  b = postgres(db.url, { max: 1, onnotice: () => {} });
  await a`create table t (id int primary key, n int)`;
  await a`insert into t values (1, 0), (2, 0)`;
});

afterAll(async () => {
  await a?.end();
  await b?.end();
  await db?.drop();
});

/** The error `work` fails with. */
async function failureOf(work: () => Promise<unknown>): Promise<unknown> {
  try {
    await work();
  } catch (err) {
    return err;
  }
  throw new Error("expected a failure");
}

function expectRetryable(err: unknown, sqlState: string): void {
  expect((err as { code?: string }).code).toBe(sqlState);
  const connectError = toConnectError(err, logger, "test/Retryable");
  expect(connectError.code).toBe(Code.Unavailable);
  expect(connectError.metadata.get("retry-after")).toBe("2");
  const answer = errorAnswer(undefined, connectError);
  expect(answer).toEqual({ status: 503, body: { error: "unavailable" }, headers: { "retry-after": "2" } });
}

describe("Postgres 'try again' conditions answer 503 with Retry-After", () => {
  it("lock not available (55P03)", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => {
      locked = r;
    });
    const holder = a.begin(async (tx) => {
      await tx`select * from t where id = 1 for update`;
      locked();
      await held;
    });
    await isLocked;
    const err = await failureOf(() =>
      b.begin(async (tx) => {
        await tx`set local lock_timeout = '50ms'`;
        await tx`select * from t where id = 1 for update`;
      }),
    );
    release();
    await holder;
    expectRetryable(err, "55P03");
  });

  it("serialization failure (40001)", async () => {
    let step!: () => void;
    const bothRead = new Promise<void>((r) => {
      step = r;
    });
    let aRead!: () => void;
    const aHasRead = new Promise<void>((r) => {
      aRead = r;
    });
    const first = a.begin("isolation level serializable", async (tx) => {
      await tx`select sum(n) from t`;
      aRead();
      await bothRead;
      await tx`update t set n = n + 1 where id = 1`;
    });
    const second = b.begin("isolation level serializable", async (tx) => {
      await aHasRead;
      await tx`select sum(n) from t`;
      await tx`update t set n = n + 1 where id = 2`;
      step();
    });
    const results = await Promise.allSettled([first, second]);
    const failed = results.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
    expect(failed, "one of two conflicting serializable transactions fails").toBeDefined();
    expectRetryable(failed!.reason, "40001");
  });

  it("deadlock detected (40P01)", async () => {
    let aLocked!: () => void;
    const aHasLocked = new Promise<void>((r) => {
      aLocked = r;
    });
    let bLocked!: () => void;
    const bHasLocked = new Promise<void>((r) => {
      bLocked = r;
    });
    const first = a.begin(async (tx) => {
      await tx`set local deadlock_timeout = '50ms'`;
      await tx`update t set n = n + 1 where id = 1`;
      aLocked();
      await bHasLocked;
      await tx`update t set n = n + 1 where id = 2`;
    });
    const second = b.begin(async (tx) => {
      await tx`set local deadlock_timeout = '50ms'`;
      await tx`update t set n = n + 1 where id = 2`;
      bLocked();
      await aHasLocked;
      await tx`update t set n = n + 1 where id = 1`;
    });
    const results = await Promise.allSettled([first, second]);
    const failed = results.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
    expect(failed, "one side of the deadlock fails").toBeDefined();
    expectRetryable(failed!.reason, "40P01");
  });
});
