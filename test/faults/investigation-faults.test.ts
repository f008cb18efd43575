import { randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClients, type Clients } from "../../services/runtime/transport/clients.js";
import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { startApp, type TestApp } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

/**
 * Investigations under faults, over NATS: each connection of the organization is a source written
 * by hand that fails one way on its reads (it answers its capabilities, so its reads could be
 * saved): one hangs past the read budget, one answers 401, one answers 5 MiB, one is down, one
 * returns unsorted series; a healthy one reads alongside. Every incident must stay intact, every
 * read must be recorded exactly once with the right partial reason, and each run must leave one
 * timeline entry, also when NATS restarts in the middle of investigations.
 */

type Behaviour = "ok" | "hang" | "401" | "huge" | "unsorted";

interface FaultySource {
  url: string;
  reads: number;
  close(): Promise<void>;
}

const T0 = Date.parse("2024-05-01T12:00:00Z");

function point(i: number) {
  return { t: new Date(T0 + i * 60_000).toISOString(), v: i };
}

/** A remote source written without the kit: its capabilities, and metrics/range behaving as told. */
async function startFaultySource(behaviour: Behaviour): Promise<FaultySource> {
  const hanging = new Set<http.ServerResponse>();
  const state = { reads: 0 };
  const server = http.createServer((req, res) => {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(typeof body === "string" ? body : JSON.stringify(body));
    };
    if (req.url === "/v1/capabilities") {
      return send(200, { protocolVersion: "1", source: `faulty-${behaviour}`, kinds: ["metrics"], operations: [] });
    }
    if (req.url !== "/v1/metrics/range") return send(404, { error: "not found" });
    state.reads++;
    req.resume();
    const result = (series: unknown, raw: unknown = { ok: true }) => ({
      source: `faulty-${behaviour}`,
      operation: "metrics/range",
      params: {},
      fetchedAt: new Date().toISOString(),
      raw,
      partial: false,
      error: null,
      series,
    });
    switch (behaviour) {
      case "hang":
        hanging.add(res);
        return;
      case "401":
        return send(401, { error: "token expired" });
      case "huge":
        return send(200, result([], { blob: "x".repeat(5 * 1024 * 1024) }));
      case "unsorted":
        return send(200, result([{ label: "latency", unit: "ms", points: [point(2), point(1), point(0)] }]));
      default:
        return send(200, result([{ label: "latency", unit: "ms", points: [point(0), point(1), point(2)] }]));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get reads() {
      return state.reads;
    },
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`never saw ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const CASES = ["ok", "hang", "401", "huge", "down", "unsorted"] as const;
const EXPECTED_ERROR: Record<(typeof CASES)[number], RegExp | null> = {
  ok: null,
  hang: /^no answer within the read budget of 5000 ms$/,
  "401": /^credentials rejected$/,
  huge: /^response too large$/,
  down: /^unreachable: /,
  unsorted: /^invalid series: series "latency": points are not sorted ascending by time/,
};

let nats: PrivateNats;
let app: TestApp;
let clients: Clients;
let sql: postgres.Sql;
let orgId: string;
let owner: string;
const sources = new Map<string, FaultySource>();
const connectionIds = new Map<string, string>();

async function openIncidents(count: number, label: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await clients.incidents.record({
      orgId,
      orgSlug: "acme",
      alert: {
        source: "metrics-monitor",
        attachIdentity: `${label}-${i}-${randomBytes(4).toString("hex")}`,
        kind: "alert",
        title: `${label} ${i}`,
        severity: "sev2",
        entity: { kind: "service", id: "checkout-api" },
        summary: "",
      },
    });
    ids.push(res.incident!.id);
  }
  return ids;
}

/** Every incident: still open with its title, one investigation entry, and each read once with the right reason. */
async function expectIntactAndRecordedOnce(ids: string[], label: string): Promise<void> {
  for (const [index, id] of ids.entries()) {
    const incident = await app.call("GET", `/o/acme/incidents/${id}`, { token: owner });
    expect(incident.status).toBe(200);
    expect(incident.body).toMatchObject({ state: "open", title: `${label} ${index}`, severity: "sev2" });
    expect(incident.body.timeline.filter((e: { kind: string }) => e.kind === "investigation")).toHaveLength(1);
    const evidence = await app.call("GET", `/o/acme/incidents/${id}/evidence`, { token: owner });
    expect(evidence.status).toBe(200);
    expect(evidence.body.investigations.map((i: { run: number; state: string }) => [i.run, i.state])).toEqual([[1, "done"]]);
    expect(evidence.body.evidence).toHaveLength(CASES.length);
    for (const name of CASES) {
      const found = evidence.body.evidence.filter((e: { connectionName: string }) => e.connectionName === name);
      expect(found, name).toHaveLength(1);
      const expected = EXPECTED_ERROR[name];
      if (expected === null) {
        expect(found[0]).toMatchObject({ partial: false, error: null });
        expect(found[0].series[0].points).toHaveLength(3);
      } else {
        expect({ name, partial: found[0].partial }).toEqual({ name, partial: true });
        expect(found[0].error, name).toMatch(expected);
      }
    }
    const huge = evidence.body.evidence.find((e: { connectionName: string }) => e.connectionName === "huge");
    expect(huge.raw).toBe("");
    const unsorted = evidence.body.evidence.find((e: { connectionName: string }) => e.connectionName === "unsorted");
    expect(unsorted.series).toEqual([]);
    expect(JSON.parse(unsorted.raw)).toEqual({ ok: true });
  }
  const [rows] = await sql<{ n: number; keys: number }[]>`
    select count(*)::int as n, count(distinct (incident_id, read_key))::int as keys from remotesource.evidence where incident_id = any(${ids}::uuid[])`;
  expect(rows).toEqual({ n: ids.length * CASES.length, keys: ids.length * CASES.length });
}

beforeAll(async () => {
  nats = await startPrivateNats();
  app = await startApp({
    nats: nats.url,
    env: {
      SECRETS_KEYS: newSecretKeyEntry("k1"),
      REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32",
      REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1",
    },
  });
  sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
  clients = createClients(app.process.transport);
  orgId = (await clients.identity.getOrganization({ slug: "acme" })).id;
  owner = await app.ownerToken();
  for (const name of CASES) {
    const source = await startFaultySource(name === "down" ? "ok" : name);
    sources.set(name, source);
    const created = await app.call("POST", "/o/acme/remote-sources", {
      token: owner,
      body: { name, baseUrl: source.url, transport: "http", tenantRef: "tenant-faults", auth: { bearerToken: "a-token" } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    connectionIds.set(name, created.body.id);
    const saved = await app.call("PUT", `/o/acme/remote-sources/${created.body.id}/investigation-reads`, {
      token: owner,
      body: { reads: [{ name: "latency", call: "metrics/range", template: `'latency{service="' + incident.entity.id + '"}'` }] },
    });
    expect(saved.status, JSON.stringify(saved.body)).toBe(200);
  }
  // Down from now on: its reads were saved while it answered.
  await sources.get("down")!.close();
}, 120_000);

afterAll(async () => {
  for (const [name, source] of sources) if (name !== "down") await source.close();
  await sql?.end();
  await app?.stop();
  await nats?.cleanup();
});

async function allDone(ids: string[]): Promise<boolean> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from remotesource.investigations where incident_id = any(${ids}::uuid[]) and state = 'done'`;
  return row!.n === ids.length;
}

describe("investigations under faults", () => {
  it("a source that hangs, answers 401, answers 5 MiB, is down or sends unsorted series: partial with its reason, once", async () => {
    const ids = await openIncidents(3, "faults");
    await until("every investigation done", () => allDone(ids), 60_000);
    await expectIntactAndRecordedOnce(ids, "faults");
    // A rejected credential shows the connection failed until its credential is updated.
    const rejected = await app.call("GET", `/o/acme/remote-sources/${connectionIds.get("401")}`, { token: owner });
    expect(rejected.body).toMatchObject({ status: "failed", lastError: "credentials rejected" });
  }, 120_000);

  it("NATS restarted mid-investigation: every incident intact, each read recorded once, one entry per run", async () => {
    const before = sources.get("hang")!.reads;
    const ids = await openIncidents(4, "nats");
    // The hanging source holds every investigation for its read budget: NATS goes away meanwhile.
    await until("investigations running", async () => sources.get("hang")!.reads > before, 30_000);
    await nats.stop();
    await new Promise((r) => setTimeout(r, 3000));
    await nats.start();
    await until("every investigation done", () => allDone(ids), 120_000);
    await expectIntactAndRecordedOnce(ids, "nats");
  }, 180_000);
});
