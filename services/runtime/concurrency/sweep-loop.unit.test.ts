import { afterEach, describe, expect, it, vi } from "vitest";
import { createSweepLoop } from "./sweep-loop.js";

afterEach(() => {
  vi.useRealTimers();
});

describe("createSweepLoop", () => {
  it("sweeps at once on start, then once per interval counted from each sweep's start", async () => {
    vi.useFakeTimers();
    let sweeps = 0;
    const loop = createSweepLoop(
      async () => {
        sweeps++;
      },
      () => {},
    );
    loop.start(10);
    await vi.advanceTimersByTimeAsync(0);
    expect(sweeps).toBe(1);
    await vi.advanceTimersByTimeAsync(9_999);
    expect(sweeps).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(sweeps).toBe(2);
    await vi.advanceTimersByTimeAsync(30_000);
    expect(sweeps).toBe(5);
    await loop.stop();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(sweeps).toBe(5);
  });

  it("hands a failed sweep to onError and sweeps again at the next interval", async () => {
    vi.useFakeTimers();
    const errors: unknown[] = [];
    let sweeps = 0;
    const loop = createSweepLoop(
      async () => {
        sweeps++;
        if (sweeps === 1) throw new Error("database gone");
      },
      (err) => errors.push(err),
    );
    loop.start(5);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(sweeps).toBe(2);
    expect(errors.map(String)).toEqual(["Error: database gone"]);
    await loop.stop();
  });

  it("stop waits for the sweep in progress and starts no other", async () => {
    let finish!: () => void;
    let sweeps = 0;
    let finished = false;
    const loop = createSweepLoop(
      async () => {
        sweeps++;
        await new Promise<void>((resolve) => {
          finish = resolve;
        });
        finished = true;
      },
      () => {},
    );
    loop.start(0);
    await vi.waitFor(() => expect(sweeps).toBe(1));
    const stopped = loop.stop();
    let stopResolved = false;
    void stopped.then(() => {
      stopResolved = true;
    });
    await new Promise((r) => setTimeout(r, 5));
    expect(stopResolved).toBe(false);
    finish();
    await stopped;
    expect(finished).toBe(true);
    await new Promise((r) => setTimeout(r, 20));
    expect(sweeps).toBe(1);
  });
});
