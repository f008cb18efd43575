import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

/**
 * Waits for the image build `npm test` runs in the background (scripts/test.sh), when it runs one:
 * WARROOM_IMAGE_BUILD_STATUS names the file its exit status is written to once it ends. Throws
 * with the end of the build's output when it failed, or when it has not ended within `timeoutMs`.
 */
export async function awaitImageBuild(timeoutMs: number): Promise<void> {
  const statusFile = process.env.WARROOM_IMAGE_BUILD_STATUS;
  if (!statusFile) return;
  const logTail = () => {
    const log = process.env.WARROOM_IMAGE_BUILD_LOG;
    return log && existsSync(log) ? readFileSync(log, "utf8").split("\n").slice(-60).join("\n") : "(no build output)";
  };
  const until = Date.now() + timeoutMs;
  while (!existsSync(statusFile)) {
    if (Date.now() > until)
      throw new Error(`the image build (scripts/build-image.sh) has not ended after ${timeoutMs / 1000} s; its output so far:\n${logTail()}`);
    await sleep(500);
  }
  const status = readFileSync(statusFile, "utf8").trim();
  if (status !== "0") throw new Error(`the image build (scripts/build-image.sh) failed with exit status ${status}; the end of its output:\n${logTail()}`);
}

/**
 * One container test file at a time, across the run's workers: each may start the Docker daemon
 * when none runs and stop it at its end, which would pull it from under another file. A directory
 * made with mkdir is the lock (atomic), holding the holder's pid so that a lock left by a killed
 * worker is taken over. Resolves with the function that releases it.
 */
export async function holdContainerTestsLock(timeoutMs: number, lock = join(tmpdir(), "warroom-container-tests.lock")): Promise<() => void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, "pid"), String(process.pid));
      return () => rmSync(lock, { recursive: true, force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const holder = lockHolder(lock);
    if (holder === "released") continue;
    if (holder && !isAlive(holder)) rmSync(lock, { recursive: true, force: true });
    else if (Date.now() > until) throw new Error(`another container test (pid ${holder || "unknown"}) held ${lock} for ${timeoutMs / 1000} s`);
    else await sleep(500);
  }
}

/** The pid in the lock: 0 while its holder has not written it yet, "released" once the lock is gone. */
function lockHolder(lock: string): number | "released" {
  try {
    return Number(readFileSync(join(lock, "pid"), "utf8")) || 0;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    return existsSync(lock) ? 0 : "released";
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
