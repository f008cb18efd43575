import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { holdContainerTestsLock } from "./image-build.js";

describe("the container tests' lock", () => {
  // A lock of the test's own: the container tests of the same run hold the real one.
  const dir = mkdtempSync(join(tmpdir(), "wr-lock-test-"));
  const lock = join(dir, "lock");
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("is held by one at a time: the second holder gets it once the first releases it", async () => {
    const release = await holdContainerTestsLock(5_000, lock);
    let second: (() => void) | undefined;
    const waiting = holdContainerTestsLock(5_000, lock).then((r) => (second = r));
    await new Promise((r) => setTimeout(r, 700));
    expect(second).toBeUndefined();
    release();
    await waiting;
    expect(second).toBeTypeOf("function");
    second!();
  });

  it("takes over a lock whose holder is gone, and says who holds it when the wait runs out", async () => {
    mkdirSync(lock);
    // A pid no process has (above the kernel's largest).
    writeFileSync(join(lock, "pid"), "4194305");
    (await holdContainerTestsLock(2_000, lock))();

    const release = await holdContainerTestsLock(2_000, lock);
    await expect(holdContainerTestsLock(600, lock)).rejects.toThrow(`another container test (pid ${process.pid}) held`);
    release();
  });
});
