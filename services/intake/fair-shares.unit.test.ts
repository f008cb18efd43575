import { describe, expect, it } from "vitest";
import { createFairShares, ShareExceeded } from "./fair-shares.js";

/** Work that ends when the test says so. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, work: () => opened };
}

async function refusal(call: Promise<unknown>): Promise<ShareExceeded> {
  try {
    await call;
  } catch (err) {
    expect(err).toBeInstanceOf(ShareExceeded);
    return err as ShareExceeded;
  }
  throw new Error("expected a refusal");
}

describe("fair shares", () => {
  it("keeps one organization to its share while another is present, queues the rest in order, and lets another through at once", async () => {
    const shares = createFairShares({ perOrg: 2, total: 10, waitMs: 5_000, maxWaiting: 10 });
    const g = gate();
    const present = shares.run("b", g.work);
    const order: number[] = [];
    const runs = [1, 2, 3, 4].map((n) =>
      shares.run("a", async () => {
        await g.work();
        order.push(n);
      }),
    );
    expect(shares.state()).toEqual({ active: 3, waiting: 2, organizations: 2 });
    // Another organization is not behind "a"'s queue.
    expect(await shares.run("c", async () => "c done")).toBe("c done");
    g.open();
    await Promise.all([present, ...runs]);
    expect(order).toEqual([1, 2, 3, 4]);
    // Nothing is kept once nothing is in flight or waiting.
    expect(shares.state()).toEqual({ active: 0, waiting: 0, organizations: 0 });
  });

  it("lets an organization alone borrow up to the total less one share, and holds it to its share while another is present", async () => {
    const shares = createFairShares({ perOrg: 2, total: 8, waitMs: 5_000, maxWaiting: 20 });
    const a = gate();
    const b = gate();
    const present = shares.run("b", b.work);
    // With "b" present, "a" has its share; the rest waits.
    const held = Array.from({ length: 4 }, () => shares.run("a", a.work));
    expect(shares.state()).toEqual({ active: 3, waiting: 2, organizations: 2 });
    // "b" is gone: "a" is alone and borrows, so its waiters start.
    b.open();
    await present;
    expect(shares.state()).toEqual({ active: 4, waiting: 0, organizations: 1 });
    // Up to 6 (8 less a share of 2); the 7th waits.
    const more = Array.from({ length: 3 }, () => shares.run("a", a.work));
    expect(shares.state()).toEqual({ active: 6, waiting: 1, organizations: 1 });
    // The kept slots: another organization starts at once, up to its share.
    const c = gate();
    const other = [shares.run("c", c.work), shares.run("c", c.work)];
    expect(shares.state()).toEqual({ active: 8, waiting: 1, organizations: 2 });
    a.open();
    c.open();
    await Promise.all([...held, ...more, ...other]);
    expect(shares.state()).toEqual({ active: 0, waiting: 0, organizations: 0 });
  });

  it("gives a freed slot to an organization within its share before a borrower's own waiter", async () => {
    const shares = createFairShares({ perOrg: 1, total: 3, waitMs: 5_000, maxWaiting: 10 });
    const a = gate();
    const borrowed = [shares.run("a", a.work), shares.run("a", a.work)];
    const order: string[] = [];
    const c = gate();
    const third = shares.run("c", c.work);
    // The total is full: "a" borrowed one, "c" holds one; "b" and "a" wait.
    const b = shares.run("b", async () => order.push("b"));
    const aWaits = shares.run("a", async () => order.push("a3"));
    expect(shares.state()).toEqual({ active: 3, waiting: 2, organizations: 3 });
    a.open();
    await Promise.all([...borrowed, b]);
    c.open();
    await Promise.all([third, aWaits]);
    expect(order.indexOf("b")).toBeLessThan(order.indexOf("a3"));
    expect(shares.state()).toEqual({ active: 0, waiting: 0, organizations: 0 });
  });

  it("refuses a wait that would pass the caller's deadline or the wait limit, and forgets it", async () => {
    // A total of two shares: nothing to borrow.
    const shares = createFairShares({ perOrg: 1, total: 2, waitMs: 30, maxWaiting: 10 });
    const g = gate();
    const first = shares.run("a", g.work);
    const late = await refusal(shares.run("a", async () => "never", { deadline: Date.now() - 1 }));
    expect(late.refusal).toBe("share");
    const timedOut = await refusal(shares.run("a", async () => "never"));
    expect(timedOut).toMatchObject({ refusal: "share", retryAfterSeconds: 1 });
    expect(shares.state()).toEqual({ active: 1, waiting: 0, organizations: 1 });
    g.open();
    await first;
    expect(shares.state()).toEqual({ active: 0, waiting: 0, organizations: 0 });
  });

  it("sheds at once when the process is full and nothing more may wait (overload)", async () => {
    const shares = createFairShares({ perOrg: 5, total: 2, waitMs: 5_000, maxWaiting: 0 });
    const g = gate();
    const held = [shares.run("a", g.work), shares.run("b", g.work)];
    const shed = await refusal(shares.run("c", async () => "never"));
    expect(shed.refusal).toBe("overload");
    g.open();
    await Promise.all(held);
    expect(shares.state()).toEqual({ active: 0, waiting: 0, organizations: 0 });
  });

  it("hands a slot the total held back to the organization that waited longest", async () => {
    const shares = createFairShares({ perOrg: 5, total: 1, waitMs: 5_000, maxWaiting: 10 });
    const g = gate();
    const order: string[] = [];
    const first = shares.run("a", async () => {
      await g.work();
      order.push("a");
    });
    const b = shares.run("b", async () => order.push("b"));
    const c = shares.run("c", async () => order.push("c"));
    g.open();
    await Promise.all([first, b, c]);
    expect(order).toEqual(["a", "b", "c"]);
    expect(shares.state()).toEqual({ active: 0, waiting: 0, organizations: 0 });
  });

  it("releases the share when the work fails", async () => {
    const shares = createFairShares({ perOrg: 1, total: 1, waitMs: 1_000, maxWaiting: 1 });
    await expect(shares.run("a", async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(await shares.run("a", async () => "again")).toBe("again");
    expect(shares.state()).toEqual({ active: 0, waiting: 0, organizations: 0 });
  });
});
