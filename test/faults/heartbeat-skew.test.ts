import { fileURLToPath } from "node:url";
import type postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Cluster } from "../../services/process/cluster.js";
import { callApi } from "../support/app.js";
import { startFaultCluster, type FaultCluster } from "../support/fault-cluster.js";

/**
 * Three processes sweep the same heartbeats every second; one of them has a clock an hour fast.
 * Deadlines come from the database clock, so the skewed process declares nothing early, and each
 * silence opens exactly one incident whichever process sees it first.
 */
const skewedClock = fileURLToPath(new URL("../support/skewed-clock.mjs", import.meta.url));

let faults: FaultCluster;
let cluster: Cluster;
let sql: postgres.Sql;

beforeAll(async () => {
  faults = await startFaultCluster({
    env: { HEARTBEAT_SWEEP_SECONDS: "1", DATABASE_POOL_SIZE: "3" },
    gateways: 1,
    intakes: 1,
    extra: [
      { name: "heartbeats", env: {} },
      {
        name: "heartbeats",
        env: { LOG_LEVEL: "info", CLOCK_SKEW_MS: String(3600_000), NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --import ${skewedClock}` },
      },
    ],
    output: "capture",
  });
  ({ cluster, sql } = faults);
}, 180_000);

afterAll(() => faults?.stop());

describe("the heartbeat sweep on three processes, one with a clock an hour fast", () => {
  it("opens exactly one incident per silence and nothing early", async () => {
    const sweepers = cluster.processes.filter((p) => p.name === "heartbeats");
    expect(sweepers).toHaveLength(3);
    // The skewed process really lives an hour ahead: its log lines are stamped by its own clock.
    const stamped = sweepers[2]!.output.map((line) => JSON.parse(line) as { time: number }).find((l) => typeof l.time === "number");
    expect(stamped!.time - Date.now()).toBeGreaterThan(3500_000);
    const url = cluster.gatewayUrls[0]!;
    const { owner } = faults;
    const register = async (name: string, interval: number) =>
      expect(
        (await callApi(url, "POST", "/o/acme/heartbeats", { token: owner, body: { name, expectedIntervalSeconds: interval, graceSeconds: 1 } })).status,
      ).toBe(201);
    for (let i = 0; i < 30; i++) await register(`short-${i}`, 1);
    // Due in an hour by the database clock: only a process trusting its own (skewed) clock would call these silent.
    for (let i = 0; i < 10; i++) await register(`hourly-${i}`, 3600);

    const deadline = Date.now() + 60_000;
    let opened = 0;
    while (Date.now() < deadline) {
      const [row] = await sql<{ n: number }[]>`select count(*)::int as n from incidents.incidents where source = 'heartbeat'`;
      opened = row!.n;
      if (opened >= 30) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    // Several more sweeps by all three processes must change nothing.
    await new Promise((r) => setTimeout(r, 4000));
    const perHeartbeat = await sql<{ id: string; n: number }[]>`
      select entity_id as id, count(*)::int as n from incidents.incidents where source = 'heartbeat' group by entity_id order by entity_id`;
    const repeats = await sql<{ n: number }[]>`
      select count(*)::int as n from incidents.timeline_entries t join incidents.incidents i on i.id = t.incident_id
      where i.source = 'heartbeat' and t.kind <> 'opened'`;
    console.log(
      `heartbeat incidents: ${perHeartbeat.length} heartbeats, ${perHeartbeat.reduce((a, r) => a + r.n, 0)} incidents, ${repeats[0]!.n} later entries`,
    );
    expect(perHeartbeat.map((r) => r.id).sort()).toEqual(Array.from({ length: 30 }, (_, i) => `short-${i}`).sort());
    expect(perHeartbeat.every((r) => r.n === 1)).toBe(true);
    expect(repeats[0]!.n).toBe(0);
  }, 120_000);
});
