import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Cluster } from "../../services/process/cluster.js";
import { startTestCluster } from "../support/compiled-services.js";
import { FIVE_SOURCES, sendAs } from "../e2e/correlation-kit.js";
import type { Credentials } from "../e2e/triggers-kit.js";
import { callApi, freshDatabase, OWNER } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";
import { faultClusterEnv, ownerAndIngestToken } from "./load.js";

/**
 * Correlation is exactly once across replicas: five sources each deliver 20 alerts about one
 * service at once, through two intake replicas and two incident-core replicas.
 * In link mode they form one group; in attach mode one incident; either way every delivery is
 * recorded once.
 */

const PER_SOURCE = 20;

let database: Awaited<ReturnType<typeof freshDatabase>>;
let nats: PrivateNats;
let cluster: Cluster;
let sql: postgres.Sql;
let creds: Credentials;
let orgId: string;

beforeAll(async () => {
  database = await freshDatabase();
  nats = await startPrivateNats();
  cluster = await startTestCluster({
    // The manifests' pool size (deploy/base/kustomization.yaml), as the other replica tests use.
    env: faultClusterEnv(database.url, nats.url, { SHUTDOWN_GRACE_SECONDS: "1", DATABASE_POOL_SIZE: "3" }),
    port: 0,
    // One gateway keeps the machine's load down; two intakes and two incident cores are the replicas that race.
    gateways: 1,
    intakes: 2,
    extra: [{ name: "incidents", env: {} }],
  });
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
  const { owner, ingest } = await ownerAndIngestToken(cluster.gatewayUrls[0]!);
  const router = await callApi(cluster.gatewayUrls[0]!, "POST", `/o/${OWNER.org}/triggers/alertrouter-secret`, { token: owner });
  creds = { owner, ingestToken: ingest, alertRouterSecret: router.body.secret, chatSecret: "" };
  const [org] = await sql<{ id: string }[]>`select id from identity.organizations where slug = ${OWNER.org}`;
  orgId = org!.id;
}, 180_000);

afterAll(async () => {
  await sql?.end({ timeout: 2 });
  await cluster?.stop();
  await nats?.cleanup();
  await database?.drop();
});

/** Sets the mode: every replica dropped its copy of the settings before the change was answered. */
async function setMode(mode: "link" | "attach") {
  const res = await callApi(cluster.gatewayUrls[0]!, "PUT", `/o/${OWNER.org}/correlation`, { token: creds.owner, body: { mode } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/** Every source's deliveries at once, spread over the gateways; all must be acknowledged. */
async function storm(service: string, run: string) {
  const sends = FIVE_SOURCES.flatMap((source, s) =>
    Array.from({ length: PER_SOURCE }, (_, n) => sendAs(cluster.gatewayUrls[(s + n) % cluster.gatewayUrls.length]!, creds, source, service, run, n)),
  );
  const answers = await Promise.all(sends);
  const refused = answers.filter((a) => a.status < 200 || a.status >= 300);
  expect(refused.map((a) => `${a.status} ${JSON.stringify(a.body)}`)).toEqual([]);
}

/** The alert entries (opened, repeat) recorded on the entity's incidents, per incident. */
async function entriesOf(service: string) {
  return sql<{ id: string; source: string; group_id: string | null; entries: number }[]>`
    select i.id, i.source, i.correlation_group_id as group_id, count(e.id)::int as entries
    from incidents.incidents i join incidents.timeline_entries e on e.incident_id = i.id and e.kind in ('opened', 'repeat')
    where i.org_id = ${orgId} and i.entity_id = ${service} group by i.id`;
}

describe("correlation on two replicas of intake and of the incident core", () => {
  it("link: 5 sources × 20 concurrent deliveries are one group, every delivery recorded once", async () => {
    await setMode("link");
    await storm("checkout-api", "link");
    const incidents = await entriesOf("checkout-api");
    // One incident per alert of its own (the error tracker's every event opens one), all in one group.
    expect(incidents.filter((i) => i.source !== "error-tracker")).toHaveLength(4);
    expect(incidents.filter((i) => i.source === "error-tracker")).toHaveLength(PER_SOURCE);
    expect(new Set(incidents.map((i) => i.group_id)).size).toBe(1);
    expect(incidents[0]!.group_id).not.toBeNull();
    expect(incidents.reduce((sum, i) => sum + i.entries, 0)).toBe(5 * PER_SOURCE);
    for (const i of incidents) expect(i.entries, i.source).toBe(i.source === "error-tracker" ? 1 : PER_SOURCE);
  }, 240_000);

  it("attach: 5 sources × 20 concurrent deliveries are one incident, every delivery recorded once under its source", async () => {
    await setMode("attach");
    await storm("search", "attach");
    const incidents = await entriesOf("search");
    expect(incidents).toHaveLength(1);
    expect(incidents[0]!.entries).toBe(5 * PER_SOURCE);
    const bySource = await sql<{ source: string; n: number }[]>`
      select e.data->'correlation'->>'source' as source, count(*)::int as n from incidents.timeline_entries e
      where e.incident_id = ${incidents[0]!.id} and e.kind in ('opened', 'repeat') group by 1 order by 1`;
    expect(bySource).toEqual([...FIVE_SOURCES].sort().map((source) => ({ source, n: PER_SOURCE })));
  }, 240_000);
});

describe("correlation turned off and set again with another key", () => {
  it("is keyed by the new expression on every replica, though the settings start over at version 1", async () => {
    const url = cluster.gatewayUrls[0]!;
    const put = async (key: string) => {
      const res = await callApi(url, "PUT", `/o/${OWNER.org}/correlation`, { token: creds.owner, body: { mode: "link", key } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    };
    // One key for everything, read by both intake replicas.
    await put("'everything'");
    await Promise.all(Array.from({ length: 10 }, (_, n) => sendAs(url, creds, "metrics-monitor", "warm-up", "again-0", n)));
    expect((await callApi(url, "DELETE", `/o/${OWNER.org}/correlation`, { token: creds.owner })).status).toBe(204);
    // Set again, by entity: every replica, not only the one that took the change, keys the very
    // next deliveries by it.
    await put('alert.entity != null ? alert.entity.id : ""');
    await Promise.all(
      ["orders-api", "billing-api"].flatMap((service) =>
        Array.from({ length: 10 }, (_, n) => sendAs(url, creds, "metrics-monitor", service, `again-${service}`, n)),
      ),
    );
    const orders = await entriesOf("orders-api");
    const billing = await entriesOf("billing-api");
    expect(orders.length).toBeGreaterThan(0);
    expect(billing.length).toBeGreaterThan(0);
    const groups = (incidents: { group_id: string | null }[]) => new Set(incidents.map((i) => i.group_id));
    for (const group of groups(orders)) expect(groups(billing).has(group), `group ${group} holds both services`).toBe(false);
  }, 240_000);
});
