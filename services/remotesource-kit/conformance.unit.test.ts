import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAddressPolicy } from "../runtime/egress/index.js";
import { createSourceClient, type SourceTransport } from "./client/source-client.js";
import { CHECKS, RULES, runConformanceCheck, type CheckName, type ConformanceResult } from "./conformance.js";
import { startBareSource, type BareSource, type BareSourceFaults } from "./testing/bare-source.js";

// Sources written without the kit: a healthy one, and one per broken rule. Each broken variant
// must fail the named check over HTTP and over gRPC, and reads from it must give the partial
// result the spec names.

const loopbackPolicy = createAddressPolicy({ allowPrivateCidrs: ["127.0.0.1/32"], requireHttps: false, allowPrivateByDefault: true });
const TENANT = "tenant-7f3a";

function clientOf(source: BareSource, transport: SourceTransport, token = source.token) {
  return createSourceClient(
    { baseUrl: transport === "http" ? source.httpUrl : source.grpcUrl, transport, tenantRef: TENANT, credentials: { bearerToken: token } },
    { policy: loopbackPolicy },
  );
}

function check(result: ConformanceResult, name: CheckName) {
  const found = result.checks.find((c) => c.name === name);
  if (!found) throw new Error(`no check named ${name}`);
  return found;
}

const sources: BareSource[] = [];
async function bare(faults: BareSourceFaults): Promise<BareSource> {
  const source = await startBareSource(faults);
  sources.push(source);
  return source;
}

afterAll(async () => {
  await Promise.all(sources.map((s) => s.close()));
});

const RANGE = { expr: "cpu", window: { fromMs: Date.parse("2024-05-01T11:00:00Z"), toMs: Date.parse("2024-05-01T13:00:00Z") } };

describe.each(["http", "grpc"] as const)("a source written from the spec alone, over %s", (transport) => {
  it("passes when a windowed operation's window parameters are not among its params hints", async () => {
    const source = await bare({ windowOutsideParams: true });
    const result = await runConformanceCheck(clientOf(source, transport));
    expect(result.checks.filter((c) => !c.ok)).toEqual([]);
    expect(result.ok).toBe(true);
    expect(check(result, CHECKS.windows)).toMatchObject({ ok: true, warnings: [] });
    // The probe filled in the window under the source's own names.
    const probe = source.calls.find((c) => c.transport === transport && c.call === "invoke" && (c.body as { operation?: string }).operation === "search");
    expect(Object.keys((probe!.body as { params: Record<string, unknown> }).params).sort()).toEqual(["from", "to"]);
  });

  it("a failing check quotes the rule of the spec it applies", async () => {
    const source = await bare({ healthAcceptsEmptyCredential: true });
    const result = await runConformanceCheck(clientOf(source, transport));
    for (const c of result.checks) expect(c.ok ? c.rule : RULES[c.name]).toBe(c.ok ? undefined : RULES[c.name]);
    expect(check(result, CHECKS.healthFailsClosed)).toMatchObject({
      ok: false,
      rule: "The health check fails closed: an empty or wrong credential is refused.",
    });
  });
});

describe.each(["http", "grpc"] as const)("a source written without the kit, over %s", (transport) => {
  it("passes every check when it keeps the rules, and the client reads it with the tenant on every call", async () => {
    const source = await bare({});
    const client = clientOf(source, transport);
    const result = await runConformanceCheck(client);
    expect(result.checks.filter((c) => !c.ok)).toEqual([]);
    expect(result).toMatchObject({ ok: true, protocolVersion: "1" });
    expect(result.checks.map((c) => c.name)).toEqual(Object.values(CHECKS));

    const read = await client.read("metrics/range", RANGE);
    expect(read.failure).toBeUndefined();
    expect(read.result.partial).toBe(false);
    expect(read.result.error).toBeUndefined();
    expect(read.result.series[0]!.points.map((p) => p.v)).toEqual([0, 1.5, 3, 4.5]);
    expect(JSON.parse(read.result.raw)).toEqual({ name: "metrics/range", values: [1, 2, 3] });

    // Every call that carries a body carried the connection's tenant; every call its credential.
    const mine = source.calls.filter((c) => c.transport === transport && c.authorization === `Bearer ${source.token}`);
    const withBody = mine.filter((c) => !["capabilities", "health"].includes(c.call));
    expect(withBody.length).toBeGreaterThan(3);
    for (const c of withBody) expect((c.body as { tenant?: { ref?: string } }).tenant?.ref).toBe(TENANT);
  });

  it("health accepting an empty credential fails 'health fails closed'", async () => {
    const source = await bare({ healthAcceptsEmptyCredential: true });
    const result = await runConformanceCheck(clientOf(source, transport));
    expect(result.ok).toBe(false);
    expect(check(result, CHECKS.healthFailsClosed)).toMatchObject({ ok: false, detail: expect.stringContaining("health answered without a credential") });
    expect(result.checks.filter((c) => !c.ok).map((c) => c.name)).toEqual([CHECKS.healthFailsClosed]);
  });

  it("health answering ok: false warns under 'health' without failing it: the spec states the shape, not that a source must be up", async () => {
    const source = await bare({ healthReportsDown: true });
    const result = await runConformanceCheck(clientOf(source, transport));
    expect(check(result, CHECKS.health)).toMatchObject({ ok: true, warnings: [expect.stringContaining("ok: false (replica lagging)")] });
    expect(result.ok).toBe(true);
  });

  it("a source that refuses the connection fails every check, and 'credentials accepted' says no call reached it", async () => {
    const source = await bare({});
    const url = new URL(transport === "http" ? source.httpUrl : source.grpcUrl);
    await source.close();
    sources.splice(sources.indexOf(source), 1);
    const client = createSourceClient(
      { baseUrl: url.toString(), transport, tenantRef: TENANT, credentials: { bearerToken: source.token } },
      { policy: loopbackPolicy },
    );
    const result = await runConformanceCheck(client);
    expect(result.checks.filter((c) => c.ok)).toEqual([]);
    expect(check(result, CHECKS.credentials).detail).toMatch(/^not checked: no call with the connection's credential reached the source \(unreachable: /);
    expect(check(result, CHECKS.size).detail).toMatch(/^not checked: no call reached the source/);
  });

  it("unsorted series fail 'series and entries ordered and typed', and a read is partial with the shaped form dropped", async () => {
    const source = await bare({ unsortedSeries: true });
    const client = clientOf(source, transport);
    const result = await runConformanceCheck(client, { expr: "cpu" });
    expect(check(result, CHECKS.shapes)).toMatchObject({ ok: false, detail: expect.stringContaining("not sorted ascending") });
    expect(result.checks.filter((c) => !c.ok).map((c) => c.name)).toEqual([CHECKS.shapes]);

    const read = await client.read("metrics/range", RANGE);
    expect(read.result.partial).toBe(true);
    expect(read.result.error).toMatch(/^invalid series: series "cpu\{host="a"\}": points are not sorted ascending/);
    expect(read.result.series).toEqual([]);
    // The raw payload stays: the service falls back to it.
    expect(JSON.parse(read.result.raw)).toEqual({ name: "metrics/range", values: [1, 2, 3] });
  });

  it("a 5 MiB response warns under 'responses within 4 MiB' without failing it, and a read is partial 'response too large'", async () => {
    const source = await bare({ hugeResponse: true });
    const client = clientOf(source, transport);
    const result = await runConformanceCheck(client);
    // The spec says what the service does with a larger answer, not that the source breaks a rule.
    expect(check(result, CHECKS.size)).toMatchObject({
      ok: true,
      detail: expect.stringContaining("response too large"),
      warnings: [expect.stringContaining("response too large")],
    });

    const read = await client.read("metrics/range", RANGE);
    expect(read.result).toMatchObject({ partial: true, error: "response too large", operation: "metrics/range", raw: "" });
    expect(read.failure?.kind).toBe("too-large");
  });

  it("401 on every call fails 'credentials accepted', and a read is partial 'credentials rejected'", async () => {
    const source = await bare({ rejectEveryCall: true });
    const client = clientOf(source, transport);
    const result = await runConformanceCheck(client);
    expect(result.ok).toBe(false);
    expect(check(result, CHECKS.credentials)).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/^credentials rejected: capabilities answered (HTTP 401|UNAUTHENTICATED)/),
    });
    expect(check(result, CHECKS.capabilities).ok).toBe(false);

    const read = await client.read("invoke", { operation: "cpu", params: {} });
    expect(read.result).toMatchObject({ partial: true, error: "credentials rejected", operation: "cpu" });
    expect(read.failure?.kind).toBe("credentials-rejected");
  });

  it("protocol version 2 is refused with a clear message", async () => {
    const source = await bare({ protocolVersion: "2" });
    const result = await runConformanceCheck(clientOf(source, transport));
    expect(result.ok).toBe(false);
    expect(result.protocolVersion).toBe("2");
    expect(check(result, CHECKS.protocolVersion)).toMatchObject({
      name: CHECKS.protocolVersion,
      ok: false,
      detail:
        'the source reports protocol version "2"; this service speaks version 1 only, so the source is refused. Serve version 1, or upgrade the service to one that speaks 2.',
    });
    // Nothing else is tried against a protocol this service does not speak.
    expect(check(result, CHECKS.advertised)).toMatchObject({ ok: false, detail: 'not run: protocol version "2" is not 1' });
  });

  it("an advertised operation that 404s fails 'advertised operations', and invoking it reads as partial", async () => {
    const source = await bare({ advertisedOperationMissing: true });
    const client = clientOf(source, transport);
    const result = await runConformanceCheck(client);
    expect(check(result, CHECKS.advertised)).toMatchObject({ ok: false, detail: expect.stringMatching(/^ghost: answered (HTTP 404|NOT_FOUND)/) });
    expect(result.checks.filter((c) => !c.ok).map((c) => c.name)).toEqual([CHECKS.advertised]);

    const read = await client.read("invoke", { operation: "ghost", params: {} });
    expect(read.result.partial).toBe(true);
    expect(read.result.error).toMatch(/^not found \((HTTP 404|NOT_FOUND): unknown operation "ghost"\)$/);
  });

  it("a wrong credential reads as partial 'credentials rejected'", async () => {
    const source = await bare({});
    const read = await clientOf(source, transport, "not-the-token").read("metrics/list", {});
    expect(read.result).toMatchObject({ partial: true, error: "credentials rejected", operation: "metrics/list" });
  });
});

describe("the client's limits", () => {
  let server: http.Server;
  let h2: http2.Http2Server;
  let httpUrl: string;
  let grpcUrl: string;

  beforeAll(async () => {
    // Sends just over the cap, then keeps the connection open without ending: a client that
    // waited for the end or buffered everything would time out instead of answering at once.
    server = http.createServer((req, res) => {
      if (req.url === "/v1/health") return; // never answers
      res.writeHead(200, { "content-type": "application/json" });
      res.write(Buffer.alloc(4 * 1024 * 1024 + 1, 0x20));
    });
    // Declares a 5 MiB gRPC message and sends nothing more.
    h2 = http2.createServer();
    h2.on("stream", (stream) => {
      stream.respond({ ":status": 200, "content-type": "application/grpc" });
      const head = Buffer.alloc(5);
      head.writeUInt32BE(5 * 1024 * 1024, 1);
      stream.write(head);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
    httpUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    grpcUrl = `http://127.0.0.1:${(h2.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await new Promise<void>((resolve) => h2.close(() => resolve()));
  });

  it.each([
    ["http", () => httpUrl],
    ["grpc", () => grpcUrl],
  ] as const)("over %s, stops reading at 4 MiB and answers 'response too large' without waiting for the rest", async (transport, url) => {
    const client = createSourceClient(
      { baseUrl: url(), transport, tenantRef: TENANT, credentials: { bearerToken: "t" } },
      { policy: loopbackPolicy, budgetMs: 20_000 },
    );
    // No clock decides it: the server never ends its answer, so a client that waited for the rest
    // would end at its budget with a timeout, never with "response too large".
    const read = await client.read("metrics/list", {});
    expect(read.result).toMatchObject({ partial: true, error: "response too large" });
  });

  it("gives up at the read budget with a partial result", async () => {
    const client = createSourceClient(
      { baseUrl: httpUrl, transport: "http", tenantRef: TENANT, credentials: { bearerToken: "t" } },
      { policy: loopbackPolicy, budgetMs: 300 },
    );
    const started = Date.now();
    const outcome = await client.call("health", undefined);
    expect(outcome).toMatchObject({ ok: false, failure: { kind: "timeout" } });
    // A hang detector (over 25 times the 300 ms budget): the health route never answers.
    expect(Date.now() - started).toBeLessThan(8000);
  });

  it("calls only what the address policy allows: loopback needs an allow entry, and denied ranges are refused", async () => {
    const remoteSourceDefault = createAddressPolicy({ allowPrivateCidrs: [], requireHttps: false });
    const denied = createAddressPolicy({ allowPrivateCidrs: ["127.0.0.1/32"], denyCidrs: ["127.0.0.0/8"], requireHttps: false, allowPrivateByDefault: true });
    for (const [policy, text] of [
      [remoteSourceDefault, "Refused outbound address 127.0.0.1, a loopback address"],
      [denied, "Refused outbound address 127.0.0.1, in a denied range"],
    ] as const) {
      for (const transport of ["http", "grpc"] as const) {
        const client = createSourceClient(
          { baseUrl: transport === "http" ? httpUrl : grpcUrl, transport, tenantRef: TENANT, credentials: { bearerToken: "t" } },
          { policy },
        );
        const read = await client.read("metrics/list", {});
        expect(read.result).toMatchObject({ partial: true, error: text });
      }
    }
  });

  it("refuses a read request it cannot send, before calling anyone", async () => {
    const client = createSourceClient(
      { baseUrl: httpUrl, transport: "http", tenantRef: TENANT, credentials: { bearerToken: "t" } },
      { policy: loopbackPolicy },
    );
    await expect(client.read("metrics/range", { expr: "up" })).rejects.toThrow("request.window {fromMs, toMs} is required");
    await expect(client.read("invoke", { params: {} })).rejects.toThrow("request.operation is required");
    await expect(client.read("logs/range", { window: { fromMs: 1.5, toMs: 2 } })).rejects.toThrow(/invalid value for WindowBounds\.fromMs/);
  });
});

// Only the HTTP form can carry these: the gRPC schema holds a double and a string.
describe("a source whose JSON breaks rule 7, over http", () => {
  it.each([
    ['values as strings ("42")', "strings", /point 0 has value NaN or not a JSON number, not a finite number/],
    ['a value "Infinity"', "infinity", /point 1 has value NaN or not a JSON number, not a finite number/],
    ["times as epoch seconds", "epochTimes", /point 0 has time "1714564800", not ISO 8601/],
  ] as const)("series with %s fail 'series and entries ordered and typed', quoting rule 7; a read drops them", async (_label, seriesJson, detail) => {
    const source = await bare({ seriesJson });
    const client = clientOf(source, "http");
    const result = await runConformanceCheck(client, { expr: "cpu" });
    expect(check(result, CHECKS.shapes)).toMatchObject({ ok: false, detail: expect.stringMatching(detail), rule: expect.stringMatching(/^Rule 7: /) });
    expect(result.checks.filter((c) => !c.ok).map((c) => c.name)).toEqual([CHECKS.shapes]);
    expect(result.ok).toBe(false);

    const read = await client.read("metrics/range", RANGE);
    expect(read.result.partial).toBe(true);
    expect(read.result.error).toMatch(/^invalid series: /);
    expect(read.result.series).toEqual([]);
  });
});
