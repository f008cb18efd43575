import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callApi } from "../support/app.js";
import { startFaultCluster, type FaultCluster } from "../support/fault-cluster.js";
import { makeDeliveries, runLoad } from "./load.js";

/**
 * Faults under load against the production shape (every service its own process, two gateways,
 * two intakes) on a private Postgres and a private NATS that the tests may kill and restart.
 * Each asserts that no delivery acknowledged with a 2xx is lost and none is doubled.
 */

let faults: FaultCluster;

beforeAll(async () => {
  faults = await startFaultCluster({
    postgres: "private",
    env: { SHUTDOWN_GRACE_SECONDS: "1", DATABASE_POOL_SIZE: "4" },
    gateways: 2,
    intakes: 2,
    title: "Fault tests",
  });
}, 180_000);

afterAll(() => faults?.stop());

describe("faults under load", () => {
  it("kill -9 of one intake replica loses and doubles nothing", async () => {
    const victim = faults.processNamed("intake");
    const result = await runLoad({
      urls: faults.cluster.gatewayUrls,
      token: faults.ingest,
      deliveries: makeDeliveries("kill", 400, 40),
      concurrency: 16,
      deadlineMs: 60_000,
      at: { fraction: 0.3, action: async () => void victim.child.kill("SIGKILL") },
    });
    expect(victim.child.signalCode).toBe("SIGKILL");
    await faults.verify("kill -9 one intake replica", result);
  }, 180_000);

  it("NATS stopped and restarted: the gateway answers 503, recovers without a restart, and the events arrive", async () => {
    let sawUnavailable = false;
    const result = await runLoad({
      urls: faults.cluster.gatewayUrls,
      token: faults.ingest,
      deliveries: makeDeliveries("nats", 400, 40),
      concurrency: 16,
      deadlineMs: 90_000,
      at: {
        fraction: 0.3,
        action: async () => {
          await faults.nats.stop();
          const res = await callApi(faults.cluster.gatewayUrls[0]!, "POST", "/triggers", {
            token: faults.ingest,
            body: { alert_type: "error", alert_id: "probe-during-outage" },
          });
          sawUnavailable = res.status === 503;
          await new Promise((r) => setTimeout(r, 3000));
          await faults.nats.start();
        },
      },
    });
    expect(sawUnavailable).toBe(true);
    await faults.verify("NATS stop and restart", result);
    // Every incident opened so far has its incident.opened event in the stream, once.
    const [row] = await faults.sql<{ n: number }[]>`select count(*)::int as n from incidents.incidents`;
    const opened = row!.n;
    const nc = await connect({ servers: faults.nats.url });
    try {
      const jsm = await jetstreamManager(nc);
      const deadline = Date.now() + 30_000;
      let inStream = 0;
      for (;;) {
        const info = await jsm.streams.info("EVENTS", { subjects_filter: "events.incident.opened" });
        inStream = info.state.subjects?.["events.incident.opened"] ?? 0;
        if (inStream >= opened || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 500));
      }
      expect(inStream).toBe(opened);
    } finally {
      await nc.close();
    }
  }, 240_000);

  it("Postgres restarted during load loses and doubles nothing", async () => {
    const result = await runLoad({
      urls: faults.cluster.gatewayUrls,
      token: faults.ingest,
      deliveries: makeDeliveries("postgres", 400, 40),
      concurrency: 16,
      deadlineMs: 90_000,
      at: {
        fraction: 0.3,
        action: async () => {
          await faults.pg!.stop("immediate");
          await new Promise((r) => setTimeout(r, 2000));
          await faults.pg!.start();
        },
      },
    });
    await faults.verify("Postgres restart (immediate stop)", result);
  }, 240_000);
});
