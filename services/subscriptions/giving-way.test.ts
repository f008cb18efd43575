import { randomBytes } from "node:crypto";
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

/**
 * The probes a receiver gets, each checked against the rest the worker owes it: the worker runs in
 * this process, so its clock and the test's timers share one event loop. At each probe a witness
 * timer is set, due 1 ms before the rest ends (the worker starts the rest after it sees the probe
 * fail, later still); a probe that comes while the previous one's witness has not yet run came
 * inside the rest. An order of events, not a reading of the wall clock: a loaded machine only
 * delays both.
 */
function probesWithRest(restMs: number) {
  let witnessRan = true;
  const probes = { counted: 0, early: 0, watching: false };
  const behaviour = () => {
    if (probes.watching) {
      probes.counted++;
      if (!witnessRan) probes.early++;
      witnessRan = false;
      setTimeout(() => {
        witnessRan = true;
      }, restMs - 1).unref();
    }
    return "drop" as const;
  };
  return { probes, behaviour };
}

let harness: SubscriptionsHarness;

beforeAll(async () => {
  harness = await startSubscriptionsHarness({ env: { SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: "0.1,0.2,0.4" } });
  ({ app, receiver, clients, orgId, owner } = harness);
});

afterAll(() => harness?.stop());

describe("subscriptions while the process gives way to a storm", () => {
  it("a receiver that is down gets a probe every few seconds; a healthy one keeps progressing, then gets everything", async () => {
    receiver.endpoint("healthy", [], () => ({ status: 204 }));
    const down = probesWithRest(FAILING_PROBE_WHILE_GIVING_WAY_MS);
    receiver.endpoint("down", [], down.behaviour);
    await subscribe("healthy");
    await subscribe("down");

    const busy = storm();
    try {
      // The loop's business is judged over a second: wait until the process gives way.
      const deadline = Date.now() + 10_000;
      while (!backgroundShouldYield()) {
        if (Date.now() > deadline) throw new Error("the busy loop never made the process give way");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      down.probes.watching = true;
      const opened = 12;
      for (let i = 0; i < opened; i++) {
        const response = await clients.incidents.record({
          orgId,
          orgSlug: "acme",
          alert: { source: "metrics-monitor", attachIdentity: `storm-${randomBytes(6).toString("hex")}`, kind: "alert", title: `storm ${i}`, severity: "sev2" },
        });
        expect(response.outcome).toBe("opened");
      }
      // The storm runs until the down receiver has had a probe after a whole rest; meanwhile the
      // healthy receiver progresses one post a tick. Without the rest the down receiver would get
      // an attempt a tick (the retry schedule's 0.1 s waits), a hundred in one rest.
      const healthy = () => receiver.deliveries.filter((d) => d.endpoint === "healthy").length;
      const watched = Date.now();
      while (healthy() < 2 || down.probes.counted < 2) {
        if (Date.now() - watched > 60_000)
          throw new Error(`while the process gave way, the healthy receiver got ${healthy()} posts and the down one ${down.probes.counted} probes`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      down.probes.watching = false;
      expect(down.probes.early, "probes to the down receiver inside its rest").toBe(0);
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
