import { afterEach, describe, expect, it } from "vitest";
import { createWorkerPool, PoolFull, TaskTimedOut, WorkerFailed, type WorkerPool } from "./worker-pool.js";

const entry = { url: new URL("./testing/pool-test-worker.mjs", import.meta.url) };

describe("worker pool", () => {
  let pool: WorkerPool | undefined;
  afterEach(async () => {
    await pool?.close();
  });

  it("answers tasks on a thread and serves waiting organizations in turn, never one's backlog first", async () => {
    pool = createWorkerPool({ entry, workers: 1, taskMs: 60_000, maxQueued: 100, maxQueuedBytes: 1_000_000 });
    await pool.run("warm", {}, 1);
    const order: string[] = [];
    const run = (key: string, name: string) => pool!.run<{ name: string }>(key, { name }, 10).then((answer) => order.push(answer.name));
    // The first task holds the thread until every other one is queued.
    const first = run("hostile", "h0");
    const rest = [run("hostile", "h1"), run("hostile", "h2"), run("hostile", "h3"), run("quiet", "q1"), run("hostile", "h4"), run("quiet", "q2")];
    expect(pool.state()).toMatchObject({ busy: 1, queued: 6, queuedBytes: 60 });
    await Promise.all([first, ...rest]);
    // The quiet organization's tasks each wait behind one of the other's at most.
    expect(order).toEqual(["h0", "h1", "q1", "h2", "q2", "h3", "h4"]);
    expect(pool.state()).toEqual({ busy: 0, queued: 0, queuedBytes: 0, replaced: 0 });
  });

  it("refuses at once past its queue's bound in tasks or in bytes", async () => {
    pool = createWorkerPool({ entry, workers: 1, taskMs: 60_000, maxQueued: 2, maxQueuedBytes: 100 });
    await pool.run("warm", {}, 1);
    const held = pool.run("a", { spinMs: 200 }, 10);
    const queued = [pool.run("a", {}, 60), pool.run("b", {}, 30)];
    await expect(pool.run("c", {}, 1)).rejects.toBeInstanceOf(PoolFull);
    await Promise.all([held, ...queued]);
    const again = createWorkerPool({ entry, workers: 1, taskMs: 60_000, maxQueued: 10, maxQueuedBytes: 100 });
    try {
      await again.run("warm", {}, 1);
      const busy = again.run("a", { spinMs: 100 }, 1_000);
      await expect(again.run("b", {}, 101)).rejects.toBeInstanceOf(PoolFull);
      await busy;
    } finally {
      await again.close();
    }
  });

  it("terminates a thread past the wall bound, answers its task TaskTimedOut, and goes on with a fresh thread", async () => {
    pool = createWorkerPool({ entry, workers: 1, taskMs: 1_000, maxQueued: 10, maxQueuedBytes: 1_000 });
    const stuck = pool.run("hostile", { spinMs: -1 }, 1);
    const next = pool.run<{ name: string }>("quiet", { name: "after" }, 1);
    await expect(stuck).rejects.toBeInstanceOf(TaskTimedOut);
    await expect(next).resolves.toEqual({ name: "after" });
    expect(pool.state()).toMatchObject({ busy: 0, queued: 0, replaced: 1 });
  });

  it("answers a task whose thread fails or exits with WorkerFailed, and replaces an exited thread", async () => {
    pool = createWorkerPool({ entry, workers: 1, taskMs: 60_000, maxQueued: 10, maxQueuedBytes: 1_000 });
    await expect(pool.run("a", { fail: "no such rule" }, 1)).rejects.toThrow(/no such rule/);
    await expect(pool.run("a", { exit: true }, 1)).rejects.toBeInstanceOf(WorkerFailed);
    await expect(pool.run<{ name: string }>("a", { name: "fresh" }, 1)).resolves.toEqual({ name: "fresh" });
    expect(pool.state().replaced).toBe(1);
  });

  it("refuses what waits when it closes", async () => {
    pool = createWorkerPool({ entry, workers: 1, taskMs: 60_000, maxQueued: 10, maxQueuedBytes: 1_000 });
    await pool.run("warm", {}, 1);
    const running = pool.run("a", { spinMs: 100 }, 1);
    const waiting = pool.run("a", {}, 1);
    const closing = pool.close();
    await expect(waiting).rejects.toBeInstanceOf(WorkerFailed);
    await expect(running).rejects.toBeInstanceOf(WorkerFailed);
    await closing;
    await expect(pool.run("a", {}, 1)).rejects.toBeInstanceOf(WorkerFailed);
  });

  it("refuses its tasks with WorkerFailed when its thread cannot start, and tries a fresh thread for the next", async () => {
    pool = createWorkerPool({
      entry: { url: new URL("./testing/no-such-worker.mjs", import.meta.url) },
      workers: 1,
      taskMs: 60_000,
      maxQueued: 10,
      maxQueuedBytes: 1_000,
    });
    await expect(pool.run("a", {}, 1)).rejects.toThrow(/could not start/);
    await expect(pool.run("a", {}, 1)).rejects.toThrow(/could not start/);
    expect(pool.state()).toMatchObject({ busy: 0, queued: 0 });
  });
});
