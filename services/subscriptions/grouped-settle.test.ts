import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSubscriptionsHarness, type SubscriptionsHarness } from "./testing/harness.js";

/**
 * The sender writes the attempts that end together in one statement (a group), not one statement
 * each: under a storm one statement per attempt was most of the subscriptions' statements
 * (`npm run bench -- fan-out`). Rows written by one statement share its transaction's `now()`,
 * so the attempts' distinct timestamps count the statements that wrote them.
 */

let harness: SubscriptionsHarness;
const EVENTS = 40;

beforeAll(async () => {
  harness = await startSubscriptionsHarness();
}, 120_000);
afterAll(async () => {
  await harness?.stop();
});

describe("a storm's attempts", () => {
  it("are written a group at a time, each delivered once, with its attempt", async () => {
    const names: string[] = [];
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const name = `grouped-${randomBytes(4).toString("hex")}`;
      harness.receiver.endpoint(name, []);
      const res = await harness.app.call("POST", "/o/acme/subscriptions", {
        token: harness.owner,
        body: { url: harness.receiver.url(name), events: ["incident.opened"] },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      harness.receiver.setSecrets(name, [res.body.secret]);
      names.push(name);
      ids.push(res.body.id);
    }
    const run = randomBytes(4).toString("hex");
    await Promise.all(
      Array.from({ length: EVENTS }, (_, n) =>
        harness.clients.incidents.record({
          orgId: harness.orgId,
          orgSlug: "acme",
          alert: { source: "metrics-monitor", attachIdentity: `grouped-${run}-${n}`, kind: "alert", title: `grouped ${n}`, severity: "sev3" },
        }),
      ),
    );
    await expect
      .poll(
        async () => {
          const [row] = await harness.sql<{ n: number }[]>`
          select count(*)::int as n from subscriptions.deliveries where subscription_id = any(${ids}::uuid[]) and state = 'delivered'`;
          return row!.n;
        },
        { timeout: 60_000, interval: 100 },
      )
      .toBe(3 * EVENTS);
    for (const name of names) {
      const accepted = harness.receiver.acceptedIds(name);
      expect(accepted.size).toBe(EVENTS);
      expect(Math.max(...accepted.values())).toBe(1);
    }
    const [written] = await harness.sql<{ attempts: number; statements: number }[]>`
      select count(*)::int as attempts, count(distinct a.at)::int as statements
      from subscriptions.attempts a join subscriptions.deliveries d on d.id = a.delivery_id
      where d.subscription_id = any(${ids}::uuid[])`;
    console.log(`grouped settle: ${written!.attempts} attempts written by ${written!.statements} statements`);
    expect(written!.attempts).toBe(3 * EVENTS);
    expect(written!.statements).toBeLessThan(written!.attempts);
  });
});
