import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Cluster } from "../../services/process/cluster.js";
import { startTestCluster } from "../support/compiled-services.js";
import { callApi, freshDatabase } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";
import { faultClusterEnv, ownerAndIngestToken } from "./load.js";

/**
 * Acknowledgement deadlines with two incident-core replicas sweeping every 0.3 s over NATS: each
 * passed step writes one incident.unacknowledged event, also when both replicas are killed between
 * the deadline and the sweep and the restarted ones find the step. The database clock is the test
 * clock: the incidents' opening is moved back instead of waiting minutes.
 */

const INCIDENTS = 30;

let database: Awaited<ReturnType<typeof freshDatabase>>;
let nats: PrivateNats;
let cluster: Cluster;
let sql: postgres.Sql;
const ids: string[] = [];

beforeAll(async () => {
  database = await freshDatabase();
  nats = await startPrivateNats();
  cluster = await startTestCluster({
    env: faultClusterEnv(database.url, nats.url, { SHUTDOWN_GRACE_SECONDS: "1", DATABASE_POOL_SIZE: "3", ESCALATION_SWEEP_SECONDS: "0.3" }),
    port: 0,
    gateways: 1,
    intakes: 1,
    extra: [{ name: "incidents", env: {} }],
  });
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
  const url = cluster.gatewayUrls[0]!;
  const { owner, ingest } = await ownerAndIngestToken(url);
  const policy = await callApi(url, "PUT", "/o/acme/escalation", { token: owner, body: { severities: [{ severity: "sev1", minutes: [5, 15, 30] }] } });
  expect(policy.status, JSON.stringify(policy.body)).toBe(200);
  for (let i = 0; i < INCIDENTS; i++) {
    const res = await callApi(url, "POST", "/triggers", {
      token: ingest,
      body: { title: `Replica escalation ${i}`, alert_type: "error", priority: "P1", alert_id: `esc-${i}`, event_id: `esc-${i}` },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    ids.push(res.body.incidentId);
  }
  await sql`update incidents.incidents set severity = 'sev1' where id = any(${ids}::uuid[])`;
}, 240_000);

afterAll(async () => {
  await sql?.end({ timeout: 2 });
  await cluster?.stop();
  await nats?.cleanup();
  await database?.drop();
});

/**
 * Per step, how many incidents hold it, and how many events were written for it: the step's
 * timeline entries, which the claiming statement writes with its incident.unacknowledged event.
 */
async function stepCounts(step: number): Promise<{ held: number; events: number; incidentsWithOneEvent: number }> {
  const [held] = await sql<{ n: number }[]>`
    select count(*)::int as n from incidents.escalation_steps where incident_id = any(${ids}::uuid[]) and step = ${step} and outcome = 'emitted'`;
  // The timeline entry is written by the same statement as the event, once per claimed step.
  const perIncident = await sql<{ n: number }[]>`
    select count(*)::int as n from incidents.timeline_entries
    where incident_id = any(${ids}::uuid[]) and kind = 'unacknowledged' and (data->>'step')::int = ${step}
    group by incident_id`;
  const events = perIncident.reduce((n, r) => n + r.n, 0);
  return { held: held!.n, events, incidentsWithOneEvent: perIncident.filter((r) => r.n === 1).length };
}

describe("escalation on two incident-core replicas", () => {
  it("writes one event per step while both sweep at once", async () => {
    expect(cluster.processes.filter((p) => p.name === "incidents")).toHaveLength(2);
    await sql`update incidents.incidents set opened_at = now() - interval '5 minutes 1 second' where id = any(${ids}::uuid[])`;
    await expect.poll(async () => (await stepCounts(1)).held, { timeout: 60_000 }).toBe(INCIDENTS);
    // Several more sweeps of both replicas change nothing.
    await new Promise((r) => setTimeout(r, 2000));
    expect(await stepCounts(1)).toEqual({ held: INCIDENTS, events: INCIDENTS, incidentsWithOneEvent: INCIDENTS });
  }, 120_000);

  it("writes one event per step when both replicas are stopped between the deadline and the sweep", async () => {
    const replicas = cluster.processes.filter((p) => p.name === "incidents");
    const restartsBefore = replicas.map((p) => p.restarts ?? 0);
    // SIGHUP ends a process at once, without its drain, and the cluster starts it again (as
    // Kubernetes restarts a crashed container); SIGKILL would leave it down.
    for (const replica of replicas) replica.child.kill("SIGHUP");
    // Step 2's deadline passes while no replica runs.
    await sql`update incidents.incidents set opened_at = now() - interval '15 minutes 1 second' where id = any(${ids}::uuid[])`;
    await expect.poll(() => replicas.every((p, i) => (p.restarts ?? 0) > restartsBefore[i]!), { timeout: 60_000 }).toBe(true);
    await expect.poll(async () => (await stepCounts(2)).held, { timeout: 120_000 }).toBe(INCIDENTS);
    await new Promise((r) => setTimeout(r, 2000));
    const step2 = await stepCounts(2);
    expect(step2.held).toBe(INCIDENTS);
    expect(step2.incidentsWithOneEvent).toBe(INCIDENTS);
    expect(step2.events).toBe(INCIDENTS);
    expect((await stepCounts(1)).events).toBe(INCIDENTS);
  }, 240_000);
});
