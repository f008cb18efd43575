import { randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClients, type Clients } from "../runtime/transport/clients.js";
import { newSecretKeyEntry } from "../runtime/credentials/secret-box.js";
import { startApp, type TestApp } from "../../test/support/app.js";

// How investigation runs behave against a source written by hand on loopback, over real HTTP:
// text Postgres cannot hold, a run that keeps failing on the way, a source whose capabilities
// fail, and the connections a run's calls travel on.

const T0 = Date.parse("2024-05-01T12:00:00Z");

interface CountingSource {
  url: string;
  /** TCP connections accepted, capabilities calls and metrics/range calls. */
  counts: { connections: number; capabilities: number; reads: number };
  /** What metrics/range answers; capabilities fail with 500 while `capabilitiesFail` is set. */
  behaviour: { capabilitiesFail: boolean; result: () => unknown };
  close(): Promise<void>;
}

function okResult(label = "latency") {
  return {
    source: "counting",
    operation: "metrics/range",
    params: {},
    fetchedAt: new Date().toISOString(),
    raw: { ok: true },
    partial: false,
    error: null,
    series: [{ label, unit: "ms", points: [0, 1, 2].map((i) => ({ t: new Date(T0 + i * 60_000).toISOString(), v: i })) }],
  };
}

async function startCountingSource(): Promise<CountingSource> {
  const counts = { connections: 0, capabilities: 0, reads: 0 };
  const behaviour = { capabilitiesFail: false, result: () => okResult() as unknown };
  const server = http.createServer((req, res) => {
    req.resume();
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.url === "/v1/capabilities") {
      counts.capabilities++;
      if (behaviour.capabilitiesFail) return send(500, { error: "capabilities store down" });
      return send(200, { protocolVersion: "1", source: "counting", kinds: ["metrics"], operations: [] });
    }
    if (req.url !== "/v1/metrics/range") return send(404, { error: "not found" });
    counts.reads++;
    return send(200, behaviour.result());
  });
  // Idle connections stay open long enough for a client that keeps them to reuse them.
  server.keepAliveTimeout = 120_000;
  server.on("connection", () => counts.connections++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts,
    behaviour,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let app: TestApp;
let sql: postgres.Sql;
let clients: Clients;
let orgId: string;
let owner: string;
let source: CountingSource;
let connectionId: string;

async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`never saw ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function openIncident(label: string): Promise<string> {
  const res = await clients.incidents.record({
    orgId,
    orgSlug: "acme",
    alert: {
      source: "metrics-monitor",
      attachIdentity: `${label}-${randomBytes(4).toString("hex")}`,
      kind: "alert",
      title: label,
      severity: "sev2",
      entity: { kind: "service", id: "checkout-api" },
      summary: "",
    },
  });
  return res.incident!.id;
}

/** The incident's evidence once its first run has settled (done, skipped or failed). */
async function settled(incidentId: string, timeoutMs = 60_000): Promise<any> {
  return until(
    `the investigation of ${incidentId} to settle`,
    async () => {
      const res = await app.call("GET", `/o/acme/incidents/${incidentId}/evidence`, { token: owner });
      const run = res.body.investigations?.find((i: { run: number }) => i.run === 1);
      return run && ["done", "skipped", "failed"].includes(run.state) && res.body;
    },
    timeoutMs,
  );
}

beforeAll(async () => {
  app = await startApp({
    env: { SECRETS_KEYS: newSecretKeyEntry("k1"), REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32", REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1" },
  });
  sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
  clients = createClients(app.process.transport);
  orgId = (await clients.identity.getOrganization({ slug: "acme" })).id;
  owner = await app.ownerToken();
  source = await startCountingSource();
  const created = await app.call("POST", "/o/acme/remote-sources", {
    token: owner,
    body: { name: "counting", baseUrl: source.url, transport: "http", tenantRef: "tenant-runs", auth: { bearerToken: "a-token" } },
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  connectionId = created.body.id;
  const saved = await app.call("PUT", `/o/acme/remote-sources/${connectionId}/investigation-reads`, {
    token: owner,
    body: { reads: [{ name: "latency", call: "metrics/range", template: `'latency{service="' + incident.entity.id + '"}'` }] },
  });
  expect(saved.status, JSON.stringify(saved.body)).toBe(200);
}, 120_000);

afterAll(async () => {
  await source?.close();
  await sql?.end();
  await app?.stop();
});

describe("investigation runs", () => {
  it("keeps a read whose text Postgres cannot hold (NUL), cleaned, and completes the run", async () => {
    source.behaviour.result = () => ({
      ...okResult("lat\u0000ency"),
      partial: true,
      error: "disk\u0000full",
      params: { note: "a\u0000b" },
    });
    try {
      const incidentId = await openIncident("nul");
      const body = await settled(incidentId);
      expect(body.investigations[0]).toMatchObject({ run: 1, state: "done" });
      expect(body.evidence).toHaveLength(1);
      expect(body.evidence[0]).toMatchObject({ partial: true, error: "disk\uFFFDfull", params: { note: "a\uFFFDb" } });
      expect(body.evidence[0].series[0].label).toBe("lat\uFFFDency");
    } finally {
      source.behaviour.result = () => okResult();
    }
  });

  it("reads a source's capabilities once, not once per run, while they fail", async () => {
    source.behaviour.capabilitiesFail = true;
    // A changed connection reads its capabilities anew: what earlier runs kept does not answer.
    const changed = await app.call("PATCH", `/o/acme/remote-sources/${connectionId}`, { token: owner, body: { tenantRef: "tenant-runs-2" } });
    expect(changed.status).toBe(200);
    try {
      const before = source.counts.capabilities;
      const runs = 4;
      for (let i = 0; i < runs; i++) {
        const body = await settled(await openIncident(`capabilities-${i}`));
        // The read itself still runs, with the defaults the capabilities would have refined.
        expect(body.evidence[0]).toMatchObject({ partial: false });
      }
      const asked = source.counts.capabilities - before;
      // A failed read is kept for a short while: a storm of opens does not ask a failing source once per incident.
      expect(asked).toBeGreaterThanOrEqual(1);
      expect(asked).toBeLessThan(runs);
    } finally {
      source.behaviour.capabilitiesFail = false;
    }
  });

  it("sends a connection's reads over kept connections rather than a new one per call", async () => {
    const before = { ...source.counts };
    const runs = 4;
    for (let i = 0; i < runs; i++) {
      const body = await settled(await openIncident(`reuse-${i}`));
      expect(body.evidence[0]).toMatchObject({ partial: false });
    }
    const reads = source.counts.reads - before.reads;
    const connections = source.counts.connections - before.connections;
    expect(reads).toBe(runs);
    expect(connections).toBeLessThan(reads);
  });

  it("stops retrying a run that keeps failing on the way, with backoff, and says why", async () => {
    // Fault injection on the real database: recording evidence fails every time while the
    // trigger is there, as a read whose outcome cannot be stored would.
    await sql.unsafe(`
      create function remotesource.refuse_evidence() returns trigger language plpgsql as $$
      begin raise exception 'evidence store refused'; end $$;
      create trigger refuse_evidence before insert on remotesource.evidence for each row execute function remotesource.refuse_evidence();`);
    const incidentId = await openIncident("failing");
    try {
      const body = await until(
        "the failing run to stop",
        async () => {
          // Waits between attempts grow; the test moves them along on the database's clock.
          await sql`
            update remotesource.investigations set claimed_until = now()
            where incident_id = ${incidentId} and state = 'running' and claimed_until > now() and claimed_until < now() + interval '61 seconds'`;
          const res = await app.call("GET", `/o/acme/incidents/${incidentId}/evidence`, { token: owner });
          const run = res.body.investigations?.find((i: { run: number }) => i.run === 1);
          return run?.state === "failed" && res.body;
        },
        150_000,
      );
      expect(body.investigations[0].reason).toMatch(/^gave up after 6 attempts: .*evidence store refused/);
      expect(body.investigations[0].completedAt).toEqual(expect.any(String));
      expect(body.evidence).toEqual([]);
      const [row] = await sql<{ attempts: number }[]>`
        select attempts from remotesource.investigations where incident_id = ${incidentId}`;
      expect(row!.attempts).toBe(6);
      // Stopped means stopped: no further attempt is made.
      await new Promise((r) => setTimeout(r, 4000));
      const [later] = await sql<{ attempts: number; state: string }[]>`
        select attempts, state from remotesource.investigations where incident_id = ${incidentId}`;
      expect(later).toEqual({ attempts: 6, state: "failed" });
      // A member may run it again: a failed run is not in progress.
      const again = await app.call("POST", `/o/acme/incidents/${incidentId}/investigate`, { token: owner });
      expect(again.status).toBe(200);
      expect(again.body).toMatchObject({ run: 2 });
    } finally {
      await sql.unsafe(`drop trigger refuse_evidence on remotesource.evidence; drop function remotesource.refuse_evidence();`);
    }
  }, 240_000);
});
