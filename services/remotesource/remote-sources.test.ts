import { randomBytes } from "node:crypto";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UnprocessableSchema } from "../../gen/warroom/errors/v1/errors_pb.js";
import { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { startApp, type TestApp } from "../../test/support/app.js";
import { createSourceServer, type RunningSourceServer } from "../remotesource-kit/index.js";
import { startBareSource, type BareSource } from "../remotesource-kit/testing/bare-source.js";

// The connection routes end to end over real HTTP, against sources on loopback: a kit-hosted one
// and sources written without the kit, some of them broken on purpose.

const SOURCE_TOKEN = `tok-${randomBytes(12).toString("hex")}`;
const T0 = Date.parse("2024-05-01T12:00:00Z");

let app: TestApp;
let owner: string;
let member: string;
let kitSource: RunningSourceServer;
const tenantsSeen: string[] = [];
// Filled in beforeAll, before any test reads it.
const bare = {} as Record<"good" | "rejecting" | "huge" | "v2" | "fromSpec", BareSource>;
let db: postgres.Sql;

beforeAll(async () => {
  app = await startApp({
    env: {
      // Sources here are on loopback, and one on a private network: a remote source reaches
      // either only when its range is allowed by name. They speak plain http, where a bearer token
      // goes only to a host allowed by name.
      REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32,10.1.2.0/24",
      REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1,10.1.2.3",
      REMOTE_SOURCE_DENY_CIDRS: "10.99.0.0/16",
      SECRETS_KEYS: `test1:${randomBytes(32).toString("base64")}`,
    },
  });
  db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  owner = await app.ownerToken();
  const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email: "member@acme.test", password: "member password 1", role: "member" } });
  expect(added.status).toBe(201);
  const login = await app.call("POST", "/auth/login", { body: { email: "member@acme.test", password: "member password 1", orgSlug: "acme" } });
  member = login.body.accessToken;

  kitSource = await createSourceServer({
    source: "kit-e2e",
    kinds: ["metrics"],
    auth: { bearerTokens: [SOURCE_TOKEN] },
    operations: [
      {
        descriptor: { operation: "deploys", description: "recent deploys", params: { service: "service name" }, kind: "changes" },
        handler: async (params, context) => {
          tenantsSeen.push(context.tenant);
          return { raw: { deploys: [{ service: params.service ?? null, at: "2024-05-01T11:00:00Z" }] } };
        },
      },
    ],
    metrics: {
      list: async (_call, context) => {
        tenantsSeen.push(context.tenant);
        return { raw: ["up"] };
      },
      range: async (call, context) => {
        tenantsSeen.push(context.tenant);
        return {
          raw: { expr: call.expr },
          series: [
            {
              label: "up",
              points: [
                { t: T0, v: 1 },
                { t: T0 + 60_000, v: 0 },
              ],
            },
          ],
        };
      },
    },
  }).listen();
  bare.good = await startBareSource({});
  bare.rejecting = await startBareSource({ rejectEveryCall: true });
  bare.huge = await startBareSource({ hugeResponse: true });
  bare.v2 = await startBareSource({ protocolVersion: "2" });
  bare.fromSpec = await startBareSource({ windowOutsideParams: true });
});

afterAll(async () => {
  await kitSource?.close();
  await Promise.all(Object.values(bare).map((s) => s.close()));
  await db?.end();
  await app?.stop();
});

let counter = 0;
async function createSource(body: Record<string, unknown>, token = owner) {
  return app.call("POST", "/o/acme/remote-sources", { token, body: { name: `source-${++counter}`, transport: "http", tenantRef: "tenant-e2e", ...body } });
}

async function auditKinds(): Promise<Array<{ kind: string; data: Record<string, unknown> }>> {
  const res = await app.call("GET", "/o/acme/audit-events", { token: owner });
  return res.body.events;
}

describe("remote source connections", () => {
  it("creates a connection: 201, the DESIGN shape, status untested, the credential never returned", async () => {
    const res = await createSource({ name: "kit", baseUrl: `${kitSource.url}/`, auth: { bearerToken: SOURCE_TOKEN } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      name: "kit",
      baseUrl: kitSource.url,
      transport: "http",
      tenantRef: "tenant-e2e",
      status: "untested",
      lastError: null,
      lastTestedAt: null,
      investigationReads: [],
    });
    const id = res.body.id;
    for (const path of [`/o/acme/remote-sources/${id}`, "/o/acme/remote-sources"]) {
      const read = await app.call("GET", path, { token: member });
      expect(read.status).toBe(200);
      expect(JSON.stringify(read.body)).not.toContain(SOURCE_TOKEN);
    }
    const list = await app.call("GET", "/o/acme/remote-sources", { token: member });
    expect(list.body.remoteSources.map((s: { id: string }) => s.id)).toContain(id);
  });

  it("keeps the credential encrypted at rest, and out of the audit log", async () => {
    const res = await createSource({ baseUrl: kitSource.url, auth: { bearerToken: SOURCE_TOKEN } });
    const [row] = await db`select key_id, credential_ciphertext from remotesource.connections where id = ${res.body.id}`;
    expect(row!.key_id).toBe("test1");
    const stored = Buffer.from(row!.credential_ciphertext as Uint8Array);
    expect(stored.includes(Buffer.from(SOURCE_TOKEN))).toBe(false);
    expect(stored.toString("latin1")).not.toContain("bearerToken");
    const columns = await db`select * from remotesource.connections where id = ${res.body.id}`;
    expect(JSON.stringify(columns, (_k, v) => (v instanceof Uint8Array ? "<bytes>" : v))).not.toContain(SOURCE_TOKEN);

    let events: Array<{ kind: string; data: Record<string, unknown> }> = [];
    for (let i = 0; i < 40 && !events.some((e) => e.kind === "remote_source.created" && e.data.id === res.body.id); i++) {
      await new Promise((r) => setTimeout(r, 100));
      events = await auditKinds();
    }
    expect(events.find((e) => e.kind === "remote_source.created" && e.data.id === res.body.id)).toBeDefined();
    expect(JSON.stringify(events)).not.toContain(SOURCE_TOKEN);
  });

  it("lets members read and only admins change: 401 without a credential, 403 for a member", async () => {
    const created = await createSource({ baseUrl: kitSource.url, auth: { bearerToken: SOURCE_TOKEN } });
    const id = created.body.id;
    expect((await app.call("GET", "/o/acme/remote-sources")).status).toBe(401);
    expect((await createSource({ baseUrl: kitSource.url, auth: { bearerToken: "x" } }, member)).status).toBe(403);
    expect((await app.call("PATCH", `/o/acme/remote-sources/${id}`, { token: member, body: { name: "renamed" } })).status).toBe(403);
    expect((await app.call("DELETE", `/o/acme/remote-sources/${id}`, { token: member })).status).toBe(403);
    expect((await app.call("POST", `/o/acme/remote-sources/${id}/test`, { token: member })).status).toBe(403);
    const read = await app.call("POST", `/o/acme/remote-sources/${id}/read`, { token: member, body: { call: "metrics/list", request: {} } });
    expect(read.status).toBe(200);
  });

  it.each([
    [{ name: "" }, "name required"],
    [{ baseUrl: "" }, "baseUrl required"],
    [{ baseUrl: "ftp://127.0.0.1/" }, 'baseUrl refused: The URL scheme "ftp" is not allowed; use https or http'],
    [{ baseUrl: "http://user:pw@127.0.0.1:1" }, "baseUrl refused: The URL must not contain a user name or password"],
    [
      { baseUrl: "http://10.99.1.1:9400" },
      "baseUrl refused: Refused outbound address 10.99.1.1, in a denied range; to allow it, take its range out of REMOTE_SOURCE_DENY_CIDRS",
    ],
    [
      { baseUrl: "http://169.254.169.254" },
      "baseUrl refused: Refused outbound address 169.254.169.254, a cloud metadata endpoint; to allow it, add its range to REMOTE_SOURCE_ALLOW_CIDRS",
    ],
    [
      { baseUrl: "http://192.168.1.10:9400" },
      "baseUrl refused: Refused outbound address 192.168.1.10, an RFC 1918 private address; to allow it, add its range to REMOTE_SOURCE_ALLOW_CIDRS",
    ],
    [
      { baseUrl: "http://10.1.3.1:9400" },
      "baseUrl refused: Refused outbound address 10.1.3.1, an RFC 1918 private address; to allow it, add its range to REMOTE_SOURCE_ALLOW_CIDRS",
    ],
    [
      { baseUrl: "http://100.64.0.7:9400" },
      "baseUrl refused: Refused outbound address 100.64.0.7, a carrier-grade NAT address; to allow it, add its range to REMOTE_SOURCE_ALLOW_CIDRS",
    ],
    [
      { baseUrl: "http://[fd12:3456::1]:9400" },
      "baseUrl refused: Refused outbound address fd12:3456::1, an IPv6 unique local address; to allow it, add its range to REMOTE_SOURCE_ALLOW_CIDRS",
    ],
    [{ baseUrl: "http://127.0.0.1:1?x=1" }, "baseUrl must not have a query or a fragment"],
    [{ transport: "carrier-pigeon" }, "transport must be http or grpc"],
    [{ tenantRef: " " }, "tenantRef required"],
    [{ auth: {} }, "auth required: a bearerToken, or a clientCertPem with its clientKeyPem"],
    [{ auth: { bearerToken: "two words" } }, "auth.bearerToken must be at most 4096 characters without spaces or control characters"],
    [{ auth: { clientCertPem: "x" } }, "auth.clientCertPem and auth.clientKeyPem go together"],
    [{ auth: { clientCertPem: "x", clientKeyPem: "y" } }, "a client certificate or CA needs an https baseUrl"],
    [{ baseUrl: "https://127.0.0.1:1", auth: { clientCertPem: "x", clientKeyPem: "y" } }, "auth.clientCertPem is not a PEM certificate"],
  ])("refuses %j with 400 %s", async (override, message) => {
    const res = await createSource({ baseUrl: kitSource.url, auth: { bearerToken: SOURCE_TOKEN }, ...override });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: message });
  });

  it("accepts a private-network address REMOTE_SOURCE_ALLOW_CIDRS names, and refuses a second connection of the same name", async () => {
    const res = await createSource({ name: "in-cluster", baseUrl: "http://10.1.2.3:9400", auth: { bearerToken: "t" } });
    expect(res.status).toBe(201);
    const again = await createSource({ name: "in-cluster", baseUrl: "http://10.1.2.3:9400", auth: { bearerToken: "t" } });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: 'a remote source named "in-cluster" already exists' });
  });

  it("tests a conforming source over HTTP and over gRPC, and marks it connected", async () => {
    for (const transport of ["http", "grpc"]) {
      const created = await createSource({ baseUrl: kitSource.url, transport, auth: { bearerToken: SOURCE_TOKEN } });
      const test = await app.call("POST", `/o/acme/remote-sources/${created.body.id}/test`, { token: owner });
      expect(test.status).toBe(200);
      expect(test.body.checks.filter((c: { ok: boolean }) => !c.ok)).toEqual([]);
      expect(test.body).toMatchObject({ ok: true, protocolVersion: "1" });
      expect(test.body.checks).toHaveLength(12);
      expect(test.body.checks[0]).toEqual({ name: "capabilities", ok: true, detail: 'source "kit-e2e", kinds metrics, 1 operation(s)' });
      const after = await app.call("GET", `/o/acme/remote-sources/${created.body.id}`, { token: member });
      expect(after.body).toMatchObject({ status: "connected", lastError: null, lastTestedAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T/) });
    }
  });

  it("reads through a connection: the RawResult as JSON, the service's tenant on the call", async () => {
    const created = await createSource({ baseUrl: kitSource.url, transport: "grpc", tenantRef: "tenant-read", auth: { bearerToken: SOURCE_TOKEN } });
    const id = created.body.id;
    tenantsSeen.length = 0;
    const range = await app.call("POST", `/o/acme/remote-sources/${id}/read`, {
      token: member,
      body: { call: "metrics/range", request: { expr: "up", window: { fromMs: T0, toMs: T0 + 120_000 }, tenant: { ref: "someone-else" } } },
    });
    expect(range.status).toBe(200);
    expect(range.body).toEqual({
      source: "kit-e2e",
      operation: "metrics/range",
      params: { expr: "up", window: { fromMs: T0, toMs: T0 + 120_000 } },
      fetchedAt: expect.any(String),
      raw: { expr: "up" },
      partial: false,
      error: null,
      series: [
        {
          label: "up",
          points: [
            { t: "2024-05-01T12:00:00.000Z", v: 1 },
            { t: "2024-05-01T12:01:00.000Z", v: 0 },
          ],
        },
      ],
    });
    const invoke = await app.call("POST", `/o/acme/remote-sources/${id}/read`, {
      token: member,
      body: { call: "invoke", request: { operation: "deploys", params: { service: "api" } } },
    });
    expect(invoke.body).toMatchObject({
      operation: "deploys",
      params: { service: "api" },
      raw: { deploys: [{ service: "api", at: "2024-05-01T11:00:00Z" }] },
      partial: false,
      error: null,
    });
    expect(tenantsSeen).toEqual(["tenant-read", "tenant-read"]);

    const unknown = await app.call("POST", `/o/acme/remote-sources/${id}/read`, {
      token: member,
      body: { call: "invoke", request: { operation: "nope", params: {} } },
    });
    expect(unknown.status).toBe(200);
    expect(unknown.body).toMatchObject({ operation: "nope", partial: true, error: 'not found (NOT_FOUND: unknown operation "nope")', raw: null });
  });

  it("refuses a read it cannot send with 400, and an unknown connection with 404", async () => {
    const created = await createSource({ baseUrl: kitSource.url, auth: { bearerToken: SOURCE_TOKEN } });
    const path = `/o/acme/remote-sources/${created.body.id}/read`;
    expect((await app.call("POST", path, { token: member, body: { call: "metrics/delete", request: {} } })).body).toEqual({
      error: "call must be one of invoke, metrics/list, metrics/range, logs/streams, logs/range",
    });
    const noWindow = await app.call("POST", path, { token: member, body: { call: "metrics/range", request: { expr: "up" } } });
    expect(noWindow).toMatchObject({ status: 400, body: { error: "request.window {fromMs, toMs} is required" } });
    for (const id of ["00000000-0000-4000-8000-000000000000", "not-a-uuid"]) {
      expect((await app.call("GET", `/o/acme/remote-sources/${id}`, { token: member })).status).toBe(404);
      expect((await app.call("POST", `/o/acme/remote-sources/${id}/read`, { token: member, body: { call: "metrics/list", request: {} } })).status).toBe(404);
    }
  });

  it("records a rejected credential as a partial read and a failed connection, until the credential is updated", async () => {
    const created = await createSource({ baseUrl: bare.rejecting.httpUrl, auth: { bearerToken: bare.rejecting.token } });
    const id = created.body.id;
    const read = await app.call("POST", `/o/acme/remote-sources/${id}/read`, { token: member, body: { call: "metrics/list", request: {} } });
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ operation: "metrics/list", partial: true, error: "credentials rejected", raw: null });
    expect((await app.call("GET", `/o/acme/remote-sources/${id}`, { token: member })).body).toMatchObject({
      status: "failed",
      lastError: "credentials rejected",
      lastTestedAt: null,
    });

    // A rename is not a new credential: still failed.
    const renamed = await app.call("PATCH", `/o/acme/remote-sources/${id}`, { token: owner, body: { name: "rejecting" } });
    expect(renamed.body).toMatchObject({ name: "rejecting", status: "failed", lastError: "credentials rejected" });
    const updated = await app.call("PATCH", `/o/acme/remote-sources/${id}`, { token: owner, body: { auth: { bearerToken: "a-new-token" } } });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ status: "untested", lastError: null });

    const test = await app.call("POST", `/o/acme/remote-sources/${id}/test`, { token: owner });
    expect(test.body.ok).toBe(false);
    expect(test.body.checks.find((c: { name: string }) => c.name === "credentials accepted")).toMatchObject({
      ok: false,
      detail: expect.stringContaining("credentials rejected"),
    });
    const after = (await app.call("GET", `/o/acme/remote-sources/${id}`, { token: member })).body;
    expect(after.status).toBe("failed");
    expect(after.lastError).toContain("credentials accepted: credentials rejected");
    expect(after.lastTestedAt).not.toBeNull();
  });

  it("cuts a response over 4 MiB to a partial 'response too large'", async () => {
    for (const [transport, url] of [
      ["http", bare.huge.httpUrl],
      ["grpc", bare.huge.grpcUrl],
    ] as const) {
      const created = await createSource({ baseUrl: url, transport, auth: { bearerToken: bare.huge.token } });
      const read = await app.call("POST", `/o/acme/remote-sources/${created.body.id}/read`, { token: member, body: { call: "metrics/list", request: {} } });
      expect(read.body).toMatchObject({ operation: "metrics/list", partial: true, error: "response too large", raw: null });
    }
  });

  it("marks connected a source whose window parameters are not among its params hints (the spec does not ask it)", async () => {
    for (const [transport, url] of [
      ["http", bare.fromSpec.httpUrl],
      ["grpc", bare.fromSpec.grpcUrl],
    ] as const) {
      const created = await createSource({ baseUrl: url, transport, auth: { bearerToken: bare.fromSpec.token } });
      const test = await app.call("POST", `/o/acme/remote-sources/${created.body.id}/test`, { token: owner });
      expect(test.body.checks.filter((c: { ok: boolean }) => !c.ok)).toEqual([]);
      expect(test.body.ok).toBe(true);
      expect((await app.call("GET", `/o/acme/remote-sources/${created.body.id}`, { token: member })).body.status).toBe("connected");
    }
  });

  it("refuses a source speaking protocol version 2 at Test connection, with a clear message", async () => {
    const created = await createSource({ baseUrl: bare.v2.httpUrl, auth: { bearerToken: bare.v2.token } });
    const test = await app.call("POST", `/o/acme/remote-sources/${created.body.id}/test`, { token: owner });
    expect(test.body).toMatchObject({ ok: false, protocolVersion: "2" });
    const version = test.body.checks.find((c: { name: string }) => c.name === "protocol version");
    expect(version.detail).toContain('the source reports protocol version "2"; this service speaks version 1 only');
    // A failing check quotes the rule it applies.
    expect(version.detail).toContain(
      'rule: "A source reporting a major version the service does not speak is refused at Test connection with a clear message."',
    );
    expect((await app.call("GET", `/o/acme/remote-sources/${created.body.id}`, { token: member })).body.status).toBe("failed");
  });

  it("updates the target (back to untested) and deletes (204, then 404)", async () => {
    const created = await createSource({ baseUrl: bare.good.httpUrl, auth: { bearerToken: bare.good.token } });
    const id = created.body.id;
    expect((await app.call("POST", `/o/acme/remote-sources/${id}/test`, { token: owner })).body.ok).toBe(true);
    const moved = await app.call("PATCH", `/o/acme/remote-sources/${id}`, { token: owner, body: { baseUrl: bare.good.grpcUrl, transport: "grpc" } });
    expect(moved.body).toMatchObject({ baseUrl: bare.good.grpcUrl, transport: "grpc", status: "untested" });
    expect((await app.call("POST", `/o/acme/remote-sources/${id}/test`, { token: owner })).body.ok).toBe(true);
    expect((await app.call("PATCH", `/o/acme/remote-sources/${id}`, { token: owner, body: { transport: "smoke" } })).status).toBe(400);
    expect((await app.call("DELETE", `/o/acme/remote-sources/${id}`, { token: owner })).status).toBe(204);
    expect((await app.call("GET", `/o/acme/remote-sources/${id}`, { token: owner })).status).toBe(404);
  });

  it("resolves a connection for intake: a remote trigger naming it opens an incident, an unknown one is 422", async () => {
    const created = await createSource({ baseUrl: bare.good.httpUrl, auth: { bearerToken: bare.good.token } });
    const [row] = await db`select org_id from remotesource.connections where id = ${created.body.id}`;
    const internal = createClient(RemoteSourcesService, app.process.transport);
    expect(await internal.resolveConnection({ orgId: row!.org_id, connectionId: created.body.id })).toMatchObject({
      id: created.body.id,
      name: created.body.name,
    });
    const unknown = await internal
      .resolveConnection({ orgId: row!.org_id, connectionId: "00000000-0000-4000-8000-000000000000" })
      .catch((e) => ConnectError.from(e));
    expect(unknown).toMatchObject({ code: Code.InvalidArgument, rawMessage: "Unknown remote connection" });
    expect((unknown as ConnectError).findDetails(UnprocessableSchema)).toHaveLength(1);

    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    const payload = { serviceSource: "remote", title: "Queue backlog", severity: "sev2", dedupKey: `backlog-${randomBytes(4).toString("hex")}` };
    const opened = await app.call("POST", "/triggers", { token: ingest, body: { ...payload, connectionId: created.body.id } });
    expect(opened.status).toBe(201);
    expect(opened.body.outcome).toBe("opened");
    const refused = await app.call("POST", "/triggers", { token: ingest, body: { ...payload, connectionId: "00000000-0000-4000-8000-000000000000" } });
    expect(refused.status).toBe(422);
  });
});
