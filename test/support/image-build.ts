import { existsSync, readFileSync } from "node:fs";
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
