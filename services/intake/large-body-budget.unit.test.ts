import { describe, expect, it } from "vitest";
import { ShareExceeded } from "./fair-shares.js";
import { LARGE_BODY_BYTES } from "./custom-sources/large-bodies.js";
import { createLargeBodyBudget } from "./large-body-budget.js";

const MiB = 1024 * 1024;

/** A budget on a clock the test moves; `charge` answers the wait it asked for (ms) instead of sleeping it. */
function budgetAt(bytesPerSecond: number, maxWaitMs = 2_000) {
  let clock = 0;
  const budget = createLargeBodyBudget({ bytesPerSecond, maxWaitMs, now: () => clock });
  return {
    budget,
    advance: (ms: number) => {
      clock += ms;
    },
    /** The wait a charge took, read off an aborted sleep: 0 when it was taken at once. */
    async waitOf(orgId: string, bytes: number, deadlineMs?: number): Promise<number | ShareExceeded> {
      const abort = new AbortController();
      const started = performance.now();
      const charged = budget.charge(orgId, bytes, { deadlineMs, signal: abort.signal });
      abort.abort();
      try {
        await charged;
        return 0;
      } catch (err) {
        if (err instanceof ShareExceeded) return err;
        return Math.max(1, performance.now() - started); // aborted while waiting its turn
      }
    },
  };
}

describe("each organization's budget of large bodies", () => {
  it("takes a large body at once, then spaces the next ones by their bytes at the budget's rate", async () => {
    const { waitOf } = budgetAt(8 * MiB);
    expect(await waitOf("a", MiB)).toBe(0);
    expect(await waitOf("a", MiB)).toBeGreaterThan(0); // 125 ms later, not now
  });

  it("never charges a body of 64 KiB or less, nor anything when the budget is zero", async () => {
    const { waitOf } = budgetAt(MiB);
    for (let i = 0; i < 100; i++) expect(await waitOf("a", LARGE_BODY_BYTES)).toBe(0);
    const off = budgetAt(0);
    for (let i = 0; i < 100; i++) expect(await off.waitOf("a", 10 * MiB)).toBe(0);
    expect(off.budget.size()).toBe(0);
  });

  it("keeps each organization's turns apart", async () => {
    const { waitOf } = budgetAt(MiB);
    expect(await waitOf("a", MiB)).toBe(0);
    expect(await waitOf("b", MiB)).toBe(0);
  });

  it("refuses a body whose turn is past the wait, with the seconds to its turn, and takes nothing for it", async () => {
    const { waitOf, advance } = budgetAt(MiB, 2_000);
    expect(await waitOf("a", 2 * MiB)).toBe(0); // the next turn is 2 s away: still within the wait
    expect(await waitOf("a", MiB)).toBeGreaterThan(0); // 2 s away: waits; the next is now 3 s away
    const refused = await waitOf("a", MiB);
    expect(refused).toBeInstanceOf(ShareExceeded);
    expect((refused as ShareExceeded).refusal).toBe("large-bodies");
    expect((refused as ShareExceeded).retryAfterSeconds).toBe(3);
    // The refusal took no turn: a second later the same body waits 2 s, within the wait.
    advance(1_000);
    expect(await waitOf("a", MiB)).toBeGreaterThan(0);
  });

  it("refuses a wait past the caller's deadline even within the configured wait", async () => {
    const { waitOf } = budgetAt(MiB, 10_000);
    expect(await waitOf("a", MiB)).toBe(0);
    expect(await waitOf("a", MiB, 500)).toBeInstanceOf(ShareExceeded);
    expect(await waitOf("a", MiB, 1_500)).toBeGreaterThan(0);
  });

  it("forgets organizations whose bodies are paid for, so memory follows the organizations sending now", async () => {
    const { budget, waitOf, advance } = budgetAt(100 * MiB);
    for (let i = 0; i < 1_024; i++) await waitOf(`org-${i}`, MiB);
    expect(budget.size()).toBe(1_024);
    advance(1_000);
    await waitOf("late", MiB);
    expect(budget.size()).toBe(1);
  });
});
