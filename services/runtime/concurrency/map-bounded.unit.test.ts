import { describe, expect, it } from "vitest";
import { mapBounded } from "./map-bounded.js";

const tick = () => new Promise((resolve) => setTimeout(resolve, 1));

describe("mapBounded", () => {
  it("keeps at most `limit` calls in flight and returns results in item order", async () => {
    let inFlight = 0;
    let most = 0;
    const results = await mapBounded([5, 1, 4, 2, 3, 0, 6], 3, async (n) => {
      most = Math.max(most, ++inFlight);
      for (let i = 0; i < n; i++) await tick();
      inFlight--;
      return n * 10;
    });
    expect(results).toEqual([50, 10, 40, 20, 30, 0, 60]);
    expect(most).toBe(3);
  });

  it("maps nothing for no items, and refuses a limit below one", async () => {
    expect(await mapBounded([], 4, async () => 1)).toEqual([]);
    await expect(mapBounded([1], 0, async (n) => n)).rejects.toThrow(RangeError);
  });

  it("rejects with the first failure and starts no call after it", async () => {
    const started: number[] = [];
    const run = mapBounded([1, 2, 3, 4, 5, 6], 2, async (n) => {
      started.push(n);
      await tick();
      if (n === 2) throw new Error("boom");
      return n;
    });
    await expect(run).rejects.toThrow("boom");
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(started.length).toBeLessThanOrEqual(3);
  });
});
