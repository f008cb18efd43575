import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSubscriptionsHarness, type SubscriptionsHarness } from "./testing/harness.js";
import type { Behaviour } from "./testing/webhook-receiver.js";

/**
 * The sender's backlog on /metrics, for an alert on a storm that outruns it: the deliveries not
 * yet settled, and how long the longest-due one has waited to be sent. A receiver that is down
 * only schedules retries (not due), so it raises the first and not the second; a receiver that
 * holds every post keeps its subscription's other deliveries due and unsent, and raises both.
 */

let harness: SubscriptionsHarness;

beforeAll(async () => {
  // One delivery in flight per subscription, a post held for up to 30 s, and a first retry a
  // minute away: nothing comes due again while the test looks.
  harness = await startSubscriptionsHarness({
    env: { SUBSCRIPTION_CONCURRENCY: "1", SUBSCRIPTION_TIMEOUT_SECONDS: "30", SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: "60,120" },
  });
}, 120_000);
afterAll(async () => {
  await harness?.stop();
});

async function subscribe(behaviour: Behaviour): Promise<{ id: string; name: string }> {
  const name = `ep-${randomBytes(4).toString("hex")}`;
  harness.receiver.endpoint(name, [], behaviour);
  const res = await harness.app.call("POST", "/o/acme/subscriptions", {
    token: harness.owner,
    body: { url: harness.receiver.url(name), events: ["incident.opened"] },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  harness.receiver.setSecrets(name, [res.body.secret]);
  return { id: res.body.id, name };
}

async function openIncidents(count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const answer = await harness.clients.incidents.record({
      orgId: harness.orgId,
      orgSlug: "acme",
      alert: {
        source: "metrics-monitor",
        attachIdentity: `backlog-${randomBytes(6).toString("hex")}`,
        kind: "alert",
        title: "Queue depth above 10k",
        severity: "sev2",
      },
    });
    expect(answer.outcome).toBe("opened");
  }
}

async function scrape(): Promise<{ waiting: number; backlogSeconds: number }> {
  const text = await (await fetch(harness.app.process.metricsUrl!)).text();
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1] ?? Number.NaN);
  return { waiting: value("warroom_subscription_deliveries_waiting"), backlogSeconds: value("warroom_subscription_backlog_seconds") };
}

describe("the subscription sender's backlog on /metrics", () => {
  it("counts a down receiver's deliveries as waiting but not as due, and a held receiver's queue as due for as long as it waits", async () => {
    const empty = await scrape();
    expect(empty).toEqual({ waiting: 0, backlogSeconds: 0 });

    const down = await subscribe(() => ({ status: 503 }));
    await openIncidents(2);
    // Both tried once and failed: each waits for its retry, a minute away.
    const failedOnce = async () => {
      const [row] = await harness.sql<{ n: number }[]>`
        select count(*)::int as n from subscriptions.deliveries
        where subscription_id = ${down.id} and state = 'pending' and attempt_count = 1 and next_attempt_at > now()`;
      return row!.n;
    };
    await expect.poll(failedOnce, { timeout: 20_000 }).toBe(2);
    expect(await scrape()).toEqual({ waiting: 2, backlogSeconds: 0 });

    const held = await subscribe(() => "hang");
    await openIncidents(3);
    // The held receiver has one post in flight and two due behind it; the down one three more retries.
    await expect.poll(() => harness.receiver.hanging(held.name).open, { timeout: 20_000 }).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const storm = await scrape();
    expect(storm.waiting).toBe(8);
    expect(storm.backlogSeconds).toBeGreaterThanOrEqual(1);
    expect(storm.backlogSeconds).toBeLessThan(60);
  });
});
