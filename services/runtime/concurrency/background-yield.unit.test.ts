import { describe, expect, it } from "vitest";
import { backgroundYield, type LoopReadings } from "./background-yield.js";

/** An event loop whose clock and busy time the test moves: no waiting, no timing. */
function fakeLoop() {
  const state = { now: 0, active: 0, idle: 0 };
  const loop: LoopReadings = { now: () => state.now, loopTime: () => ({ active: state.active, idle: state.idle }) };
  return {
    judge: backgroundYield(loop),
    /** `ms` of wall time pass, `busyShare` of them with the loop busy. */
    pass(ms: number, busyShare: number) {
      state.now += ms;
      state.active += ms * busyShare;
      state.idle += ms * (1 - busyShare);
    },
  };
}

describe("background work gives way", () => {
  it("while foreground work keeps the loop busy", () => {
    const { judge, pass } = fakeLoop();
    judge.noteForegroundWork();
    pass(1_100, 0.95);
    expect(judge.shouldYield()).toBe(true);
    // Judged once a second: the answer holds until the next window ends.
    pass(500, 0);
    expect(judge.shouldYield()).toBe(true);
    // The next window had no foreground work: background work runs at full speed again.
    pass(600, 0);
    expect(judge.shouldYield()).toBe(false);
  });

  it("not when the loop is busy with background work alone (a backlog draining)", () => {
    const { judge, pass } = fakeLoop();
    pass(1_100, 1);
    expect(judge.shouldYield()).toBe(false);
  });

  it("not when foreground work leaves the loop mostly idle", () => {
    const { judge, pass } = fakeLoop();
    judge.noteForegroundWork();
    pass(1_100, 0.5);
    expect(judge.shouldYield()).toBe(false);
  });

  it("not before a whole sample has passed, however busy", () => {
    const { judge, pass } = fakeLoop();
    judge.noteForegroundWork();
    pass(900, 1);
    expect(judge.shouldYield()).toBe(false);
  });

  it("reads the process's own loop", async () => {
    const judge = backgroundYield();
    judge.noteForegroundWork();
    // A real second passes idle: the process's loop was not busy.
    await new Promise((resolve) => setTimeout(resolve, 1_010));
    expect(judge.shouldYield()).toBe(false);
  });
});
