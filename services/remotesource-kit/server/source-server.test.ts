import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import https from "node:https";
import net from "node:net";
import tls from "node:tls";
import { resolve } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createAddressPolicy } from "../../runtime/egress/index.js";
import { createSourceClient } from "../client/source-client.js";
import { CHECKS, runConformanceCheck } from "../conformance.js";
import { createTestPki, type TestPki } from "../testing/certificates.js";
import { createSourceServer, SourceError, type RunningSourceServer, type SourceServerOptions } from "../index.js";

// A kit-hosted source, reached by an @grpc/grpc-js client (the schema loaded from proto/ with
// @grpc/proto-loader) and by a plain HTTP client: both forms of the one schema, on one port.

const TOKEN = "kit-test-token";
const T0 = Date.parse("2024-05-01T12:00:00Z");
const loopbackPolicy = createAddressPolicy({ allowPrivateCidrs: ["127.0.0.1/32"], requireHttps: false, allowPrivateByDefault: true });

/** The range query both the kit-hosted source and the expected capabilities describe. */
const QUERY_RANGE = {
  operation: "query_range",
  description: "a range query",
  params: { q: "expression", from: "epoch ms", to: "epoch ms" },
  kind: "metrics",
  canonical: "range",
  window: { start: "from", end: "to", format: "epoch-ms" },
} as const;

function definition(overrides: Partial<SourceServerOptions> = {}): SourceServerOptions {
  return {
    source: "kit-test",
    kinds: ["metrics", "logs"],
    auth: { bearerTokens: [TOKEN] },
    operations: [
      {
        descriptor: QUERY_RANGE,
        handler: async (params, context) => ({ raw: { echo: params, tenant: context.tenant } }),
      },
      {
        descriptor: { operation: "huge", description: "more than 4 MiB", kind: "changes" },
        handler: async () => ({ raw: { padding: "x".repeat(5 * 1024 * 1024) } }),
      },
      {
        descriptor: { operation: "picky", description: "refuses", kind: "changes" },
        handler: async () => {
          throw new SourceError("invalid-argument", "q is required");
        },
      },
      {
        descriptor: { operation: "buggy", description: "throws", kind: "changes" },
        handler: async () => {
          throw new Error("a bug with a secret in it");
        },
      },
    ],
    metrics: {
      list: async (call) => ({ raw: { names: ["up"], namespace: call.namespace ?? null } }),
      // Handed over unsorted, as epoch milliseconds, with a NaN: the kit sends them sorted, ISO, finite.
      range: async (call) => ({
        raw: { expr: call.expr, step: call.step ?? null },
        series: [
          {
            label: "up",
            unit: "1",
            points: [
              { t: T0 + 60_000, v: 2 },
              { t: T0, v: 1 },
              { t: T0 + 120_000, v: Number.NaN },
            ],
          },
        ],
      }),
    },
    logs: {
      streams: async () => ({ raw: { streams: ["app"] } }),
      range: async (call) => ({
        raw: { query: call.query, limit: call.limit ?? null },
        entries: [
          { t: new Date(T0 + 1000), line: "second", stream: "app" },
          { t: "2024-05-01T12:00:00.000123Z", line: "first", labels: { level: "info" } },
        ],
      }),
    },
    onError: () => {},
    ...overrides,
  };
}

function loadSourceProto() {
  if (!existsSync(".proto-deps/google/api/annotations.proto")) execFileSync("node", ["scripts/proto-deps.mjs"], { timeout: 20_000 });
  const definition = protoLoader.loadSync("warroom/sourceprotocol/v1/source.proto", {
    includeDirs: [resolve("proto"), resolve(".proto-deps")],
    longs: Number,
    defaults: true,
  });
  const loaded = grpc.loadPackageDefinition(definition) as any;
  return loaded.warroom.sourceprotocol.v1.SourceService as grpc.ServiceClientConstructor;
}

function unary(client: grpc.Client, method: string, request: object, metadata = new grpc.Metadata()): Promise<any> {
  return new Promise((resolve, reject) => {
    (client as any)[method](request, metadata, { deadline: Date.now() + 5000 }, (err: grpc.ServiceError | null, response: unknown) =>
      err ? reject(err) : resolve(response),
    );
  });
}

function bearer(token = TOKEN): grpc.Metadata {
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  return metadata;
}

describe("a kit-hosted source with bearer tokens", () => {
  let running: RunningSourceServer;
  let grpcClient: grpc.Client;
  const onError = vi.fn();

  beforeAll(async () => {
    running = await createSourceServer(definition({ onError })).listen();
    const SourceService = loadSourceProto();
    grpcClient = new SourceService(`127.0.0.1:${running.port}`, grpc.credentials.createInsecure());
  });

  afterAll(async () => {
    grpcClient?.close();
    await running?.close();
  });

  const get = (path: string, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) => fetch(running.url + path, { headers });
  const post = (path: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }) =>
    fetch(running.url + path, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });

  it("answers capabilities over HTTP in the spec's JSON", async () => {
    const res = await get("/v1/capabilities");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      protocolVersion: "1",
      source: "kit-test",
      kinds: ["metrics", "logs"],
      operations: [
        QUERY_RANGE,
        { operation: "huge", description: "more than 4 MiB", params: {}, kind: "changes" },
        { operation: "picky", description: "refuses", params: {}, kind: "changes" },
        { operation: "buggy", description: "throws", params: {}, kind: "changes" },
      ],
    });
  });

  it("fails health closed over HTTP: no credential, an empty one and a wrong one are refused", async () => {
    expect((await get("/v1/health", {})).status).toBe(401);
    expect((await get("/v1/health", { authorization: "Bearer " })).status).toBe(401);
    expect((await get("/v1/health", { authorization: "Bearer wrong" })).status).toBe(401);
    expect((await get("/v1/health", { authorization: `Basic ${TOKEN}` })).status).toBe(401);
    const ok = await get("/v1/health");
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ ok: true });
    // Every call, not only health, needs the credential.
    expect((await post("/v1/metrics/list", { tenant: { ref: "t" } }, {})).status).toBe(401);
  });

  it("serves metrics/range over HTTP: numbers for fromMs/toMs, raw as an object, error null, series sorted with ISO times", async () => {
    const res = await post("/v1/metrics/range", { expr: "up", window: { fromMs: T0 - 60_000, toMs: T0 + 180_000 }, step: "60s", tenant: { ref: "tenant-1" } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expect(body).toEqual({
      source: "kit-test",
      operation: "metrics/range",
      params: { expr: "up", window: { fromMs: T0 - 60_000, toMs: T0 + 180_000 }, step: "60s" },
      fetchedAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/),
      raw: { expr: "up", step: "60s" },
      partial: false,
      error: null,
      series: [
        {
          label: "up",
          unit: "1",
          points: [
            { t: "2024-05-01T12:00:00.000Z", v: 1 },
            { t: "2024-05-01T12:01:00.000Z", v: 2 },
          ],
        },
      ],
    });
  });

  it("serves logs/range with entries sorted by time, labels only when given", async () => {
    const res = await post("/v1/logs/range", { query: "err", window: { fromMs: T0, toMs: T0 + 5000 }, limit: 10, tenant: { ref: "t" } });
    const body = (await res.json()) as any;
    expect(body.entries).toEqual([
      { t: "2024-05-01T12:00:00.000123Z", line: "first", labels: { level: "info" } },
      { t: "2024-05-01T12:00:01.000Z", line: "second", stream: "app" },
    ]);
    expect(body.raw).toEqual({ query: "err", limit: 10 });
    expect(body).not.toHaveProperty("series");
  });

  it("passes the tenant and the params to an invoked operation", async () => {
    const res = await post("/v1/invoke", { operation: "query_range", params: { q: "up", from: 1, to: 2 }, tenant: { ref: "tenant-9" } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expect(body).toMatchObject({
      operation: "query_range",
      params: { q: "up", from: 1, to: 2 },
      raw: { echo: { q: "up", from: 1, to: 2 }, tenant: "tenant-9" },
      partial: false,
      error: null,
    });
  });

  it("answers 404 for an unknown operation, typed errors for refusals, and an opaque 500 for a bug", async () => {
    const unknown = await post("/v1/invoke", { operation: "nope", params: {}, tenant: { ref: "t" } });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: 'unknown operation "nope"' });
    const picky = await post("/v1/invoke", { operation: "picky", params: {}, tenant: { ref: "t" } });
    expect(picky.status).toBe(400);
    expect(await picky.json()).toEqual({ error: "q is required" });
    const buggy = await post("/v1/invoke", { operation: "buggy", params: {}, tenant: { ref: "t" } });
    expect(buggy.status).toBe(500);
    expect(await buggy.text()).toBe('{"error":"internal error"}');
    expect(onError).toHaveBeenCalledWith(expect.objectContaining({ message: "a bug with a secret in it" }), "invoke");
  });

  it("refuses bad requests: a window that is not a number, a missing window, a wrong method, an unknown path", async () => {
    const bad = await post("/v1/metrics/range", { expr: "up", window: { fromMs: "soon", toMs: 1 }, tenant: { ref: "t" } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error).toMatch(/^invalid value for WindowBounds\.fromMs/);
    const noWindow = await post("/v1/logs/range", { query: "", tenant: { ref: "t" } });
    expect(noWindow.status).toBe(400);
    expect((await post("/v1/metrics/list", "{not json")).status).toBe(400);
    expect((await get("/v1/invoke")).status).toBe(405);
    expect((await get("/v2/capabilities")).status).toBe(404);
  });

  it("cuts a read above 4 MiB to a partial 'response too large' over HTTP", async () => {
    const res = await post("/v1/invoke", { operation: "huge", params: {}, tenant: { ref: "t" } });
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text.length).toBeLessThan(4 * 1024 * 1024);
    expect(JSON.parse(text)).toMatchObject({ operation: "huge", partial: true, error: "response too large", raw: null });
  });

  it("talks to an @grpc/grpc-js client: capabilities, health, the canonical calls, raw as a JSON string", async () => {
    const capabilities = await unary(grpcClient, "Capabilities", {}, bearer());
    expect(capabilities).toMatchObject({ protocolVersion: "1", source: "kit-test", kinds: ["metrics", "logs"] });
    expect(capabilities.operations[0]).toMatchObject({
      operation: "query_range",
      canonical: "range",
      window: { start: "from", end: "to", format: "epoch-ms" },
    });

    expect(await unary(grpcClient, "Health", {}, bearer())).toMatchObject({ ok: true });

    const range = await unary(grpcClient, "MetricsRange", { expr: "up", window: { fromMs: T0, toMs: T0 + 180_000 }, tenant: { ref: "t" } }, bearer());
    expect(typeof range.raw).toBe("string");
    expect(JSON.parse(range.raw)).toEqual({ expr: "up", step: null });
    expect(range.series[0].points).toEqual([
      { t: "2024-05-01T12:00:00.000Z", v: 1 },
      { t: "2024-05-01T12:01:00.000Z", v: 2 },
    ]);
    expect(range.partial).toBe(false);

    const streams = await unary(grpcClient, "LogsStreams", { tenant: { ref: "t" } }, bearer());
    expect(JSON.parse(streams.raw)).toEqual({ streams: ["app"] });
  });

  it("over gRPC: UNAUTHENTICATED without or with a wrong credential, NOT_FOUND for an unknown operation, the 4 MiB cut", async () => {
    await expect(unary(grpcClient, "Health", {})).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
    await expect(unary(grpcClient, "Health", {}, bearer("wrong"))).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
    await expect(unary(grpcClient, "Invoke", { operation: "nope", tenant: { ref: "t" } }, bearer())).rejects.toMatchObject({
      code: grpc.status.NOT_FOUND,
      details: 'unknown operation "nope"',
    });
    const huge = await unary(grpcClient, "Invoke", { operation: "huge", tenant: { ref: "t" } }, bearer());
    expect(huge).toMatchObject({ operation: "huge", partial: true, error: "response too large", raw: "" });
  });

  it("passes the conformance check over both transports", async () => {
    for (const transport of ["http", "grpc"] as const) {
      const client = createSourceClient({ baseUrl: running.url, transport, tenantRef: "t", credentials: { bearerToken: TOKEN } }, { policy: loopbackPolicy });
      const result = await runConformanceCheck(client);
      // The "huge" operation is advertised and cut: the spec says what the service does with it,
      // not that the source breaks a rule, so the size check warns and passes.
      expect(result.checks.filter((c) => !c.ok)).toEqual([]);
      expect(result.checks.find((c) => c.name === CHECKS.size)?.warnings).toEqual([expect.stringContaining("response too large: invoke huge")]);
    }
  });
});

describe("a kit-hosted source with mutual TLS", () => {
  let pki: TestPki;
  let running: RunningSourceServer;

  beforeAll(async () => {
    pki = createTestPki();
    const base = definition();
    running = await createSourceServer({
      ...base,
      operations: base.operations!.filter((o) => o.descriptor.operation === "query_range"),
      auth: { mtls: { ca: pki.caPem, cert: pki.serverCertPem, key: pki.serverKeyPem } },
    }).listen();
  });

  afterAll(async () => {
    await running?.close();
  });

  function httpsGet(path: string, client?: { cert: string; key: string }): Promise<{ status: number; body: string }> {
    return new Promise((resolvePromise, reject) => {
      const req = https.request(running.url + path, { ca: pki.caPem, ...(client ?? {}), agent: false, timeout: 5000 }, (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => resolvePromise({ status: res.statusCode ?? 0, body }));
      });
      req.on("error", reject);
      req.end();
    });
  }

  it("serves HTTPS to a client with a certificate from its CA, and refuses one without or from another CA", async () => {
    expect(running.url).toMatch(/^https:/);
    const ok = await httpsGet("/v1/health", { cert: pki.clientCertPem, key: pki.clientKeyPem });
    expect(ok).toEqual({ status: 200, body: '{"ok":true}' });
    await expect(httpsGet("/v1/health")).rejects.toThrow();
    await expect(httpsGet("/v1/health", { cert: pki.rogueClientCertPem, key: pki.rogueClientKeyPem })).rejects.toThrow();
  });

  it("serves gRPC over TLS to an @grpc/grpc-js client with its certificate", async () => {
    const SourceService = loadSourceProto();
    const good = new SourceService(
      `127.0.0.1:${running.port}`,
      grpc.credentials.createSsl(Buffer.from(pki.caPem), Buffer.from(pki.clientKeyPem), Buffer.from(pki.clientCertPem)),
    );
    const none = new SourceService(`127.0.0.1:${running.port}`, grpc.credentials.createSsl(Buffer.from(pki.caPem)));
    try {
      expect(await unary(good, "Capabilities", {})).toMatchObject({ source: "kit-test", protocolVersion: "1" });
      await expect(unary(none, "Health", {})).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    } finally {
      good.close();
      none.close();
    }
  });

  it("passes the conformance check with the connection's client certificate, over HTTP and gRPC", async () => {
    for (const transport of ["http", "grpc"] as const) {
      const client = createSourceClient(
        {
          baseUrl: running.url,
          transport,
          tenantRef: "t",
          credentials: { clientCertPem: pki.clientCertPem, clientKeyPem: pki.clientKeyPem, caPem: pki.caPem },
        },
        { policy: loopbackPolicy },
      );
      const result = await runConformanceCheck(client);
      expect(result.checks.filter((c) => !c.ok)).toEqual([]);
      expect(result.checks.find((c) => c.name === CHECKS.healthFailsClosed)?.detail).toContain("refused at the TLS handshake");
    }
  });
});

describe("a kit-hosted source over TLS, against connections that hold a slot and send nothing", () => {
  let pki: TestPki;
  let running: RunningSourceServer;

  beforeAll(async () => {
    pki = createTestPki();
    running = await createSourceServer({ ...definition(), tls: { cert: pki.serverCertPem, key: pki.serverKeyPem } }).listen({
      deadlines: { headersMs: 300, keepAliveMs: 300, http2IdleMs: 300 },
    });
  });

  afterAll(async () => {
    await running?.close();
  });

  /** Resolves with how the connection ended: "closed" by the server, or "open" still after `waitMs`. */
  function outcome(socket: net.Socket | tls.TLSSocket, waitMs: number): Promise<"closed" | "open"> {
    return new Promise((resolvePromise) => {
      const timer = setTimeout(() => {
        socket.destroy();
        resolvePromise("open");
      }, waitMs);
      socket.on("error", () => {});
      socket.once("close", () => {
        clearTimeout(timer);
        resolvePromise("closed");
      });
    });
  }

  // Each bound is ten times the deadline: it tells a closed connection from one left open.
  it("closes a connection that never starts its TLS handshake", async () => {
    const socket = net.connect(running.port, "127.0.0.1");
    expect(await outcome(socket, 3000)).toBe("closed");
  });

  it("closes a connection that finished its handshake and then sends no request", async () => {
    const socket = tls.connect({ port: running.port, host: "127.0.0.1", ca: pki.caPem, ALPNProtocols: ["http/1.1"] });
    await new Promise<void>((resolvePromise, reject) => socket.once("secureConnect", resolvePromise).once("error", reject));
    expect(await outcome(socket, 3000)).toBe("closed");
  });

  it("closes a request whose headers never end", async () => {
    const socket = tls.connect({ port: running.port, host: "127.0.0.1", ca: pki.caPem, ALPNProtocols: ["http/1.1"] });
    await new Promise<void>((resolvePromise, reject) => socket.once("secureConnect", resolvePromise).once("error", reject));
    socket.write("GET /v1/health HTTP/1.1\r\nHost: localhost\r\n");
    // A header line now and then, each sooner than the idle deadline: only a headers deadline ends it.
    const drip = setInterval(() => socket.writable && socket.write("X-Drip: 1\r\n"), 100);
    try {
      expect(await outcome(socket, 3000)).toBe("closed");
    } finally {
      clearInterval(drip);
    }
  });
});

describe("createSourceServer", () => {
  it("refuses a definition that could not keep the protocol", () => {
    expect(() => createSourceServer(definition({ metrics: undefined }))).toThrow("kind metrics needs metrics handlers (list and range)");
    expect(() => createSourceServer(definition({ auth: { bearerTokens: [] } }))).toThrow("auth.bearerTokens must hold at least one token: health fails closed");
    expect(() => createSourceServer(definition({ auth: { bearerTokens: [""] } }))).toThrow("auth.bearerTokens must be non-empty strings without spaces");
    expect(() =>
      createSourceServer(
        definition({
          operations: [{ descriptor: { operation: "r", description: "", kind: "metrics", canonical: "range" }, handler: async () => ({ raw: null }) }],
        }),
      ),
    ).toThrow('operation "r" backs a range call: it must declare its window');
  });

  it("accepts a window whose parameters are not among the params hints, as the spec allows", () => {
    expect(() =>
      createSourceServer(
        definition({
          operations: [
            {
              descriptor: { operation: "r", description: "", kind: "metrics", params: { a: "" }, window: { start: "from", end: "to", format: "epoch-ms" } },
              handler: async () => ({ raw: null }),
            },
          ],
        }),
      ),
    ).not.toThrow();
  });
});
