import { randomBytes } from "node:crypto";
import type postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Clients } from "../runtime/transport/clients.js";
import { backgroundShouldYield, noteForegroundWork } from "../runtime/concurrency/background-yield.js";
import type { TestApp } from "../../test/support/app.js";
import { startSubscriptionsHarness, type SubscriptionsHarness } from "./testing/harness.js";
import type { WebhookReceiver } from "./testing/webhook-receiver.js";
import { FAILING_PROBE_WHILE_GIVING_WAY_MS } from "./delivery-worker.js";

/**
 * The worker while its process gives way to a storm (the event loop kept busy by foreground work,
 * `background-yield.ts`): the app runs in this process, so keeping this process's loop busy is
 * the storm. Its own file: the busy state is the process's, and would reach other tests' workers.
 */

let app: TestApp;
let receiver: WebhookReceiver;
let clients: Clients;
let sql: postgres.Sql;
let orgId: string;
let owner: string;

async function subscribe(name: string): Promise<string> {
  const res = await app.call("POST", "/o/acme/subscriptions", { token: owner, body: { url: receiver.url(name), events: ["incident.opened"] } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  receiver.setSecrets(name, [res.body.secret]);
  return res.body.id;
}

/** The event loop kept busy by "deliveries" until `stop` is called: spins, giving the loop a turn between. */
function storm(): { stop(): Promise<void> } {
  let running = true;
  const done = (async () => {
    while (running) {
      const until = performance.now() + 15;
      while (performance.now() < until) {
        // spin
      }
      noteForegroundWork();
      await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await done;
    },
  };
}

const attemptsOf = async (subscriptionId: string) => {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from subscriptions.attempts a join subscriptions.deliveries d on d.id = a.delivery_id
    where d.subscription_id = ${subscriptionId}`;
  return row!.n;
};

let harness: SubscriptionsHarness;

beforeAll(async () => {
  harness = await startSubscriptionsHarness({ env: { SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: "0.1,0.2,0.4" } });
  ({ app, receiver, clients, sql, orgId, owner } = harness);
});

afterAll(() => harness?.stop());

describe("subscriptions while the process gives way to a storm", () => {
  it("a receiver that is down gets a probe every few seconds; a healthy one keeps progressing, then gets everything", async () => {
    receiver.endpoint("healthy", [], () => ({ status: 204 }));
    receiver.endpoint("down", [], () => "drop");
    await subscribe("healthy");
    const down = await subscribe("down");

    const busy = storm();
    try {
      // The loop's business is judged over a second: wait until the process gives way.
      const deadline = Date.now() + 10_000;
      while (!backgroundShouldYield()) {
        if (Date.now() > deadline) throw new Error("the busy loop never made the process give way");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const opened = 12;
      for (let i = 0; i < opened; i++) {
        const response = await clients.incidents.record({
          orgId,
          orgSlug: "acme",
          alert: { source: "metrics-monitor", attachIdentity: `storm-${randomBytes(6).toString("hex")}`, kind: "alert", title: `storm ${i}`, severity: "sev2" },
        });
        expect(response.outcome).toBe("opened");
      }
      // Let the storm run past a tick or ten: the healthy receiver progresses one post a tick.
      const watched = Date.now();
      while (receiver.deliveries.filter((d) => d.endpoint === "healthy").length < 2) {
        if (Date.now() - watched > 20_000) throw new Error("the healthy receiver got nothing while the process gave way");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      // Without the rest it would be an attempt a tick (eight in those two seconds alone).
      const storming = Date.now() - watched;
      expect(await attemptsOf(down)).toBeLessThanOrEqual(1 + Math.ceil(storming / FAILING_PROBE_WHILE_GIVING_WAY_MS));
      expect(backgroundShouldYield(), "the storm held until the end").toBe(true);
    } finally {
      await busy.stop();
    }
    // The storm over, the healthy receiver gets every event.
    const deadline = Date.now() + 30_000;
    while (new Set(receiver.deliveries.filter((d) => d.endpoint === "healthy" && d.accepted).map((d) => d.webhookId)).size < 12) {
      if (Date.now() > deadline) throw new Error("the healthy receiver did not get every event after the storm");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });
});
