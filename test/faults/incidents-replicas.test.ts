import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import type postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DELIVERY_POOL_SIZE } from "../../services/incidents/service.js";
import type { Cluster } from "../../services/process/cluster.js";
import { startFaultCluster, type FaultCluster } from "../support/fault-cluster.js";
import { makeDeliveries, runLoad } from "./load.js";

/**
 * The incident core as the Kubernetes base runs it: two replicas, with the manifests' pool size
 * (one gateway and one intake keep the machine's load down). Both replicas take calls (each has
 * delivery connections of its own in Postgres) and run an outbox relay; each acknowledged alert must
 * be held once and open one incident, also when one replica is killed.
 */

let faults: FaultCluster;
let cluster: Cluster;
let sql: postgres.Sql;
let ingest: string;

beforeAll(async () => {
  faults = await startFaultCluster({
    // deploy/base/kustomization.yaml's DATABASE_POOL_SIZE.
    env: { SHUTDOWN_GRACE_SECONDS: "1", DATABASE_POOL_SIZE: "3" },
    gateways: 1,
    intakes: 1,
    extra: [{ name: "incidents", env: {} }],
    title: "Two incident-core replicas",
  });
  ({ cluster, sql, ingest } = faults);
}, 180_000);

afterAll(() => faults?.stop());

/** Events the incident core wrote and has not yet published: 0 once a relay has drained its outbox. */
async function pendingEvents(): Promise<number> {
  const [row] = await sql<{ n: number }[]>`select count(*)::int as n from incidents.outbox where published_at is null`;
  return row!.n;
}

/** The local TCP ports of a process's sockets: its socket inodes found in its /proc/<pid>/net tables (Linux). */
function localPortsOf(pid: number): Set<number> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    const link = (() => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        return ""; // closed since the listing
      }
    })();
    const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
    if (inode) inodes.add(inode);
  }
  const ports = new Set<number>();
  for (const table of ["tcp", "tcp6"]) {
    for (const line of readFileSync(`/proc/${pid}/net/${table}`, "utf8").split("\n").slice(1)) {
      const columns = line.trim().split(/\s+/);
      if (columns.length > 9 && inodes.has(columns[9]!)) ports.add(Number.parseInt(columns[1]!.split(":").at(-1)!, 16));
    }
  }
  return ports;
}

describe("two incident-core replicas", () => {
  it("share the calls and hold every acknowledged alert once, with one open incident per alert", async () => {
    const replicas = cluster.processes.filter((p) => p.name === "incidents");
    expect(replicas).toHaveLength(2);
    const result = await runLoad({
      urls: cluster.gatewayUrls,
      token: ingest,
      // Few alert ids for many deliveries: both replicas attach to the same incidents at once.
      deliveries: makeDeliveries("two", 300, 20),
      concurrency: 12,
      deadlineMs: 60_000,
    });
    await faults.verify("both replicas up", result);
    // A replica opens delivery-pool connections only to record deliveries: each has some.
    const deliveryPorts = (
      await sql<{ port: number }[]>`
        select client_port as port from pg_stat_activity where datname = current_database() and application_name = 'warroom-deliveries'`
    ).map((r) => r.port);
    for (const replica of replicas) {
      const ports = localPortsOf(replica.child.pid!);
      const own = deliveryPorts.filter((port) => ports.has(port));
      expect(own.length, `incidents pid ${replica.child.pid}: delivery connections`).toBeGreaterThan(0);
      expect(own.length).toBeLessThanOrEqual(DELIVERY_POOL_SIZE);
    }
    await expect.poll(pendingEvents).toBe(0);
  }, 180_000);

  it("kill -9 of one replica under load loses and doubles nothing, and the other's relay publishes its events", async () => {
    const victim = cluster.processes.find((p) => p.name === "incidents")!;
    const result = await runLoad({
      urls: cluster.gatewayUrls,
      token: ingest,
      deliveries: makeDeliveries("kill", 300, 30),
      concurrency: 12,
      deadlineMs: 60_000,
      at: { fraction: 0.3, action: async () => void victim.child.kill("SIGKILL") },
    });
    expect(victim.child.signalCode).toBe("SIGKILL");
    await faults.verify("kill -9 one incidents replica", result);
    // Whichever replica held the outbox lease, the survivor's relay publishes what is left
    // (at the latest once the dead one's lease runs out).
    await expect.poll(pendingEvents, { timeout: 60_000 }).toBe(0);
  }, 180_000);
});
