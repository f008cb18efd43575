import { describe, expect, it } from "vitest";
import { groupCalls } from "./grouped-calls.js";

describe("grouped calls", () => {
  it("handles the calls of one turn as one group, and those made meanwhile as the next", async () => {
    const groups: number[][] = [];
    let release!: () => void;
    const first = new Promise<void>((resolve) => (release = resolve));
    const call = groupCalls<number>(async (items) => {
      groups.push(items);
      if (groups.length === 1) await first;
    }, 100);

    const turnOne = [1, 2, 3].map(call);
    await new Promise((resolve) => setImmediate(resolve));
    // The first group is running: these wait for it, then go together.
    const meanwhile = [4, 5, 6, 7].map(call);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(groups).toEqual([[1, 2, 3]]);
    release();
    await Promise.all([...turnOne, ...meanwhile]);
    expect(groups).toEqual([
      [1, 2, 3],
      [4, 5, 6, 7],
    ]);
  });

  it("never hands a group more than its most", async () => {
    const sizes: number[] = [];
    const call = groupCalls<number>(async (items) => {
      sizes.push(items.length);
    }, 4);
    await Promise.all(Array.from({ length: 10 }, (_, i) => call(i)));
    expect(sizes).toEqual([4, 4, 2]);
  });

  it("fails only the caller whose item fails, even when it was grouped with others", async () => {
    const handled: number[] = [];
    const call = groupCalls<number>(async (items) => {
      if (items.includes(13)) throw new Error(`unlucky ${items.join(",")}`);
      handled.push(...items);
    }, 100);
    const outcomes = await Promise.allSettled([12, 13, 14].map(call));
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((outcomes[1] as PromiseRejectedResult).reason.message).toBe("unlucky 13");
    expect(handled.sort()).toEqual([12, 14]);
    // And the next group runs as usual.
    await call(15);
    expect(handled).toContain(15);
  });
});
