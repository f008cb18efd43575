import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Cluster } from "../../services/process/cluster.js";
import { startTestCluster } from "../support/compiled-services.js";
import { callApi, freshDatabase } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";
import { type Delivery, faultClusterEnv, ownerAndIngestToken, runLoad, verifyLoad } from "./load.js";

/**
 * Bulk resolve on two incident-core replicas, while the alerts of the selected incidents keep
 * arriving: the same bulk call sent four times at once (a double click, a retry, two responders)
 * is spread over both replicas by the NATS queue group. Each incident is resolved exactly once
 * (one `resolved` entry, one `done` among the calls), and every acknowledged repeat is held once:
 * on the incident before its resolve, or on the new incident its alert opens after.
 */

let database: Awaited<ReturnType<typeof freshDatabase>>;
let nats: PrivateNats;
let cluster: Cluster;
let sql: postgres.Sql;
let owner: string;
let ingest: string;
const report: Record<string, string | number>[] = [];

beforeAll(async () => {
  database = await freshDatabase();
  nats = await startPrivateNats();
  cluster = await startTestCluster({
    env: faultClusterEnv(database.url, nats.url, { SHUTDOWN_GRACE_SECONDS: "1", DATABASE_POOL_SIZE: "3" }),
    port: 0,
    gateways: 1,
    intakes: 1,
    extra: [{ name: "incidents", env: {} }],
  });
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
  ({ owner, ingest } = await ownerAndIngestToken(cluster.gatewayUrls[0]!));
}, 180_000);

afterAll(async () => {
  console.log("\nBulk resolve on two incident-core replicas during repeats: deliveries sent, acknowledged and found");
  console.table(report);
  await sql?.end({ timeout: 2 });
  await cluster?.stop();
  await nats?.cleanup();
  await database?.drop();
});

describe("bulk resolve on two incident-core replicas", () => {
  it("resolves each incident once and loses no repeat", async () => {
    const alerts = 30;
    const url = cluster.gatewayUrls[0]!;
    const opening: Delivery[] = Array.from({ length: alerts }, (_, n) => ({ alertId: `bulk-alert-${n}`, eventId: `bulk-first-${n}` }));
    const opened = await runLoad({ urls: [url], token: ingest, deliveries: opening, concurrency: 6, deadlineMs: 60_000 });
    await verifyLoad(sql, report, "opening", opened);
    const incidents = await sql<{ id: string }[]>`select id from incidents.incidents where state = 'open' order by opened_at`;
    expect(incidents).toHaveLength(alerts);
    const ids = incidents.map((i) => i.id);

    const calls: Promise<Awaited<ReturnType<typeof callApi>>>[] = [];
    const repeats: Delivery[] = Array.from({ length: alerts * 4 }, (_, n) => ({ alertId: `bulk-alert-${n % alerts}`, eventId: `bulk-repeat-${n}` }));
    const repeated = await runLoad({
      urls: [url],
      token: ingest,
      deliveries: repeats,
      concurrency: 8,
      deadlineMs: 60_000,
      at: {
        fraction: 0.2,
        action: async () => {
          for (let k = 0; k < 4; k++) calls.push(callApi(url, "POST", "/o/acme/incidents:bulk", { token: owner, body: { ids, action: "resolve" } }));
          await Promise.all(calls);
        },
      },
    });
    await verifyLoad(sql, report, "repeats during 4 concurrent bulk resolves", repeated);
    expect(repeated.unacknowledged).toEqual([]);

    const answers = await Promise.all(calls);
    for (const answer of answers) expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    for (const id of ids) {
      const outcomes = answers.map((a) => a.body.results.find((r: { id: string }) => r.id === id).outcome);
      expect(
        outcomes.filter((o) => o === "done"),
        id,
      ).toHaveLength(1);
      expect(
        outcomes.filter((o) => o === "unchanged"),
        id,
      ).toHaveLength(3);
    }
    const [entries] = await sql<{ resolved: number; incidents: number }[]>`
      select count(*)::int as resolved, count(distinct incident_id)::int as incidents
      from incidents.timeline_entries where kind = 'resolved' and incident_id = any(${ids}::uuid[])`;
    expect(entries).toEqual({ resolved: alerts, incidents: alerts });
    // Nothing was recorded on a selected incident after its resolve: later repeats opened new ones.
    const [late] = await sql<{ n: number }[]>`
      select count(*)::int as n from incidents.timeline_entries t
      where t.incident_id = any(${ids}::uuid[]) and t.id > (select r.id from incidents.timeline_entries r where r.incident_id = t.incident_id and r.kind = 'resolved')`;
    expect(late!.n).toBe(0);
  }, 240_000);
});
