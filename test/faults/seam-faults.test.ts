import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ClusterProcess } from "../../services/process/cluster.js";
import { callApi } from "../support/app.js";
import { startFaultCluster, type FaultCluster } from "../support/fault-cluster.js";
import { makeDeliveries, runLoad } from "./load.js";

/**
 * Faults in the seams between the parts, against the production shape (every service its own
 * process, two gateways, two intakes, over a private NATS server the tests restart): a drained
 * intake replica, a stalled incident core, NATS restarting while a reply larger than one NATS
 * message is in flight, and an error-tracker sender that gives up after 1 ms and retries. Each
 * counts what was sent, acknowledged, found once, doubled and lost.
 */

let faults: FaultCluster;

beforeAll(async () => {
  faults = await startFaultCluster({
    env: { SHUTDOWN_GRACE_SECONDS: "5", DATABASE_POOL_SIZE: "4" },
    gateways: 2,
    intakes: 2,
    title: "Seam faults",
  });
}, 180_000);

afterAll(() => faults?.stop());

async function untilReady(proc: ClusterProcess): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const ok = await fetch(`http://127.0.0.1:${proc.port}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${proc.name} did not come back`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe("faults in the seams", () => {
  it("SIGTERM of an intake replica under load: it drains, is started again, and nothing is lost or doubled", async () => {
    const victim = faults.processNamed("intake");
    const before = victim.child;
    const exited = new Promise<number | null>((resolve) => before.once("exit", (code) => resolve(code)));
    const result = await runLoad({
      urls: faults.cluster.gatewayUrls,
      token: faults.ingest,
      deliveries: makeDeliveries("sigterm", 400, 40),
      concurrency: 16,
      deadlineMs: 60_000,
      at: { fraction: 0.3, action: async () => void before.kill("SIGTERM") },
    });
    // It ended on its own (drained), and the cluster started it again.
    expect(await exited).toBe(0);
    await faults.verify("SIGTERM one of two intake replicas (drained, restarted)", result);
    await untilReady(victim);
  }, 180_000);

  it("SIGSTOP of the incidents process for 5 s under load: calls wait out the stall, nothing is lost or doubled", async () => {
    const incidents = faults.processNamed("incidents");
    let stalledFor = 0;
    const result = await runLoad({
      urls: faults.cluster.gatewayUrls,
      token: faults.ingest,
      deliveries: makeDeliveries("sigstop", 400, 40),
      concurrency: 16,
      deadlineMs: 90_000,
      at: {
        fraction: 0.3,
        action: async () => {
          const started = Date.now();
          incidents.child.kill("SIGSTOP");
          // A timer may fire a little early by the wall clock when the event loop was busy as it
          // was set (libuv measures from its cached loop time), so wait until 5 s have passed.
          while (Date.now() - started < 5000) await new Promise((r) => setTimeout(r, 5000 - (Date.now() - started)));
          incidents.child.kill("SIGCONT");
          stalledFor = Date.now() - started;
        },
      },
    });
    expect(stalledFor).toBeGreaterThanOrEqual(5000);
    await faults.verify("SIGSTOP of the incidents process for 5 s", result);
  }, 180_000);

  it("NATS restarted while replies larger than one NATS message are in flight: each read is whole or a clean 503, and deliveries are not lost or doubled", async () => {
    // An incident whose timeline page of 500 is about 1.2 MiB: over NATS it travels in parts.
    const alertId = "large-reply";
    let incidentId = "";
    for (let i = 0; i <= 140; i++) {
      const res = await callApi(faults.cluster.gatewayUrls[0]!, "POST", "/triggers", {
        token: faults.ingest,
        body: { title: "Large timeline", alert_type: "error", alert_id: alertId, event_id: `large-${i}`, body: `entry ${i} `.padEnd(8192, "x") },
      });
      expect(res.status).toBeLessThan(300);
      incidentId ||= res.body.incidentId;
    }
    const reads = { sent: 0, whole: 0, cleanRefusals: 0, broken: 0 };
    let reading = true;
    const readLoop = async (gateway: string) => {
      while (reading) {
        reads.sent++;
        const res = await callApi(gateway, "GET", `/o/acme/incidents/${incidentId}/timeline?limit=500`, { token: faults.owner }).catch(() => ({
          status: 0,
          body: null,
        }));
        if (
          res.status === 200 &&
          res.body.entries.length === 141 &&
          res.body.entries.every((e: { summary: string }, i: number) => e.summary === `entry ${i} `.padEnd(8192, "x"))
        )
          reads.whole++;
        else if (res.status === 503 || res.status === 0) reads.cleanRefusals++;
        else reads.broken++;
      }
    };
    const readers = [readLoop(faults.cluster.gatewayUrls[0]!), readLoop(faults.cluster.gatewayUrls[1]!)];
    const result = await runLoad({
      urls: faults.cluster.gatewayUrls,
      token: faults.ingest,
      deliveries: makeDeliveries("large-reply", 300, 30),
      concurrency: 8,
      deadlineMs: 90_000,
      at: {
        fraction: 0.3,
        action: async () => {
          await faults.nats.stop();
          await new Promise((r) => setTimeout(r, 2000));
          await faults.nats.start();
        },
      },
    });
    // Reads go on after the restart: the large reply crosses again.
    const afterRestart = reads.whole;
    const until = Date.now() + 30_000;
    while (reads.whole < afterRestart + 5 && Date.now() < until) await new Promise((r) => setTimeout(r, 200));
    reading = false;
    await Promise.all(readers);
    faults.report.push({
      fault: "NATS restart with ~1.2 MiB replies in flight (reads)",
      sent: reads.sent,
      acknowledged: reads.whole,
      "found once": reads.whole,
      doubled: 0,
      lost: reads.broken,
      failures: `503 or reset: ${reads.cleanRefusals}`,
    });
    expect(reads.broken).toBe(0);
    expect(reads.whole).toBeGreaterThanOrEqual(afterRestart + 5);
    await faults.verify("NATS restart with ~1.2 MiB replies in flight (deliveries)", result);
  }, 240_000);

  it("an error-tracker sender that retries every request once after a 1 ms timeout opens each incident once", async () => {
    const base = (await import("../e2e/triggers-kit.js")).fixture("sentry/event-alert-triggered.json");
    const events = Array.from({ length: 200 }, (_, i) => `retry-1ms-${i}`);
    const acknowledged: string[] = [];
    const answers = new Map<string, string>();
    let abandoned = 0;
    let attempts = 0;
    let next = 0;
    const worker = async (w: number) => {
      for (;;) {
        const index = next++;
        if (index >= events.length) return;
        const eventId = events[index]!;
        const body = JSON.stringify({ ...base, data: { ...base.data, event: { ...base.data.event, event_id: eventId } } });
        const headers = { authorization: `Bearer ${faults.ingest}`, "content-type": "application/json", "request-id": `req-${eventId}` };
        // The first try gives up after 1 ms, whatever the service does with it.
        attempts++;
        await fetch(`${faults.cluster.gatewayUrls[w % 2]}/triggers`, { method: "POST", headers, body, signal: AbortSignal.timeout(1) }).then(
          (res) => res.arrayBuffer(),
          () => abandoned++,
        );
        const deadline = Date.now() + 60_000;
        for (let attempt = 1; ; attempt++) {
          attempts++;
          const res = await fetch(`${faults.cluster.gatewayUrls[(w + attempt) % 2]}/triggers`, {
            method: "POST",
            headers,
            body,
            signal: AbortSignal.timeout(20_000),
          }).catch(() => undefined);
          const answer = res ? ((await res.json().catch(() => null)) as { incidentId?: string } | null) : null;
          if (res && (res.status === 200 || res.status === 201) && answer?.incidentId) {
            acknowledged.push(eventId);
            answers.set(eventId, answer.incidentId);
            break;
          }
          if (Date.now() > deadline) break;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));
    const held = await faults.sql<{ event_id: string; n: number; ids: string[] }[]>`
      select e.event_id, count(*)::int as n, array_agg(e.incident_id::text) as ids
      from incidents.timeline_entries e where e.kind = 'opened' and e.event_id = any(${events}) group by e.event_id`;
    const found = held.filter((h) => h.n === 1 && h.ids[0] === answers.get(h.event_id)).length;
    const doubled = held.filter((h) => h.n > 1).length;
    faults.report.push({
      fault: "error-tracker sender retrying each request once after a 1 ms timeout",
      sent: events.length,
      acknowledged: acknowledged.length,
      "found once": found,
      doubled,
      lost: acknowledged.length - found - doubled,
      "retried attempts": attempts - events.length,
      failures: `first tries abandoned: ${abandoned}`,
    });
    expect(acknowledged).toHaveLength(events.length);
    expect(doubled).toBe(0);
    expect(found).toBe(events.length);
  }, 180_000);
});
