import { describe, expect, it } from "vitest";
import { backgroundShouldYield, noteForegroundWork } from "./background-yield.js";

/** Keeps this thread's event loop busy, as a storm of deliveries would. */
function busyFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // spin
  }
}
const idleFor = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Starts a fresh sample window: the first call after a second judges (and ends) the one before. */
async function freshWindow(): Promise<void> {
  await idleFor(1_050);
  backgroundShouldYield();
}

describe("background work gives way", () => {
  it("while foreground work keeps the loop busy", async () => {
    await freshWindow();
    noteForegroundWork();
    busyFor(1_100);
    expect(backgroundShouldYield()).toBe(true);
    // Judged once a second: the answer holds until the next window ends.
    expect(backgroundShouldYield()).toBe(true);
  });

  it("not when the loop is busy with background work alone (a backlog draining)", async () => {
    await freshWindow();
    busyFor(1_100);
    expect(backgroundShouldYield()).toBe(false);
  });

  it("not when foreground work leaves the loop mostly idle", async () => {
    await freshWindow();
    noteForegroundWork();
    await idleFor(1_100);
    expect(backgroundShouldYield()).toBe(false);
  });
});
