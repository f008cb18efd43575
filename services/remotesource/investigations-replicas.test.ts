import { randomBytes } from "node:crypto";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixture, issueCredentials, postTrigger, unique } from "../../test/e2e/triggers-kit.js";
import { startApp, type TestApp } from "../../test/support/app.js";
import { createPrometheusFilesSource } from "../remotesource-kit/examples/prometheus-files/source.js";
import type { RunningSourceServer } from "../remotesource-kit/index.js";
import { startFakePrometheus } from "../remotesource-kit/testing/fake-prometheus.js";

// Two replicas over NATS share one database. Each caches, per organization, whether it has an
// investigation read (investigation.ts): an organization without one records nothing when its
// incidents open. The first read an organization configures must reach the very next incident it
// opens, on whichever replica consumes its event: the change is broadcast before it is answered.

const SOURCE_TOKEN = `tok-${randomBytes(12).toString("hex")}`;
/** The durable consumer of incident.opened that records due investigations (investigation.ts). */
const CONSUMER = "remotesource-investigation";

let apps: TestApp[] = [];
let owner: string;
let ingestToken: string;
let db: postgres.Sql;
let prometheus: Awaited<ReturnType<typeof startFakePrometheus>>;
let source: RunningSourceServer;
let connectionId: string;

beforeAll(async () => {
  const env = {
    REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32",
    REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1",
    SECRETS_KEYS: `test1:${randomBytes(32).toString("base64")}`,
  };
  const first = await startApp({ nats: true, env });
  apps = [first];
  apps.push(await startApp({ nats: first.natsUrl!, databaseUrl: first.databaseUrl, env }));
  db = postgres(first.databaseUrl, { max: 1, onnotice: () => {} });
  owner = await first.ownerToken();
  ingestToken = (await issueCredentials(first, "acme", owner)).ingestToken;
  prometheus = await startFakePrometheus();
  source = await createPrometheusFilesSource({ prometheusUrl: prometheus.url, logDir: "/nonexistent", auth: { bearerTokens: [SOURCE_TOKEN] } }).listen({
    host: "127.0.0.1",
  });
  // A connection, but no investigation read yet.
  const created = await first.call("POST", "/o/acme/remote-sources", {
    token: owner,
    body: { name: "example", baseUrl: source.url, transport: "http", tenantRef: "tenant-replicas", auth: { bearerToken: SOURCE_TOKEN } },
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  connectionId = created.body.id;
}, 240_000);

afterAll(async () => {
  await source?.close();
  await prometheus?.close();
  await db?.end();
  // The first app owns the database and the NATS server: stop it last.
  for (const app of [...apps].reverse()) await app.stop();
});

/** Opens an incident through `app` and answers its id. */
async function openIncident(app: TestApp): Promise<string> {
  const body = { ...fixture("datadog/custom-body-triggered.json"), alert_id: unique("alert"), event_id: unique("event") };
  const res = await postTrigger(app, ingestToken, body);
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  expect(res.body.outcome).toBe("opened");
  return res.body.incidentId;
}

/** Waits until every incident.opened event so far has been consumed, and its group recorded, by the investigation starter. */
async function startersCaughtUp(): Promise<void> {
  await expect.poll(async () => (await db`select 1 from incidents.outbox limit 1`).length, { timeout: 30_000 }).toBe(0);
  const nc = await connect({ servers: apps[0]!.natsUrl! });
  try {
    const jsm = await jetstreamManager(nc);
    await expect
      .poll(
        async () => {
          const info = await jsm.consumers.info("EVENTS", CONSUMER);
          return info.num_pending + info.num_ack_pending;
        },
        { timeout: 30_000, interval: 200 },
      )
      .toBe(0);
  } finally {
    await nc.close();
  }
}

/** How many investigations were recorded for these incidents. */
async function investigationsOf(incidentIds: string[]): Promise<number> {
  const [row] = await db<{ n: number }[]>`select count(*)::int as n from remotesource.investigations where incident_id = any(${incidentIds}::uuid[])`;
  return row!.n;
}

/** The investigation of `incidentId` once it has finished. */
async function investigationDone(incidentId: string): Promise<{ state: string; reads: number }> {
  let found: { state: string; reads: number } | undefined;
  await expect
    .poll(
      async () => {
        const [row] = await db<{ state: string; reads: number }[]>`
          select i.state, (select count(*)::int from remotesource.evidence e where e.incident_id = i.incident_id and e.run = i.run) as reads
          from remotesource.investigations i where i.incident_id = ${incidentId} and i.run = 1`;
        found = row;
        return row?.state;
      },
      { timeout: 40_000, interval: 100 },
    )
    .toBe("done");
  return found!;
}

describe("investigations on two replicas: an organization's first investigation read", () => {
  it("investigates the very next incident, after both replicas found no read for the organization's earlier ones", async () => {
    // Incidents opened on both replicas before any read: their events reach the starters of both
    // (the durable consumer is shared), which find no read and cache that.
    const before: string[] = [];
    for (let i = 0; i < 8; i++) before.push(await openIncident(apps[i % 2]!));
    await startersCaughtUp();
    expect(await investigationsOf(before)).toBe(0);

    // The first read, saved through one replica; the next incidents open through each.
    const saved = await apps[0]!.call("PUT", `/o/acme/remote-sources/${connectionId}/investigation-reads`, {
      token: owner,
      body: { reads: [{ name: "up", call: "metrics/range", template: "'up'" }] },
    });
    expect(saved.status, JSON.stringify(saved.body)).toBe(200);
    const after = [await openIncident(apps[1]!), await openIncident(apps[0]!), await openIncident(apps[1]!), await openIncident(apps[0]!)];
    for (const incidentId of after) expect(await investigationDone(incidentId)).toEqual({ state: "done", reads: 1 });
  }, 120_000);

  it("an organization whose last read is removed records no more investigations", async () => {
    const cleared = await apps[1]!.call("PUT", `/o/acme/remote-sources/${connectionId}/investigation-reads`, { token: owner, body: { reads: [] } });
    expect(cleared.status, JSON.stringify(cleared.body)).toBe(200);
    const after = [await openIncident(apps[0]!), await openIncident(apps[1]!)];
    await startersCaughtUp();
    expect(await investigationsOf(after)).toBe(0);
  }, 60_000);
});
