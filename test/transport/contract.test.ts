import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code, ConnectError, createClient, createConnectRouter, type Transport } from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";
import { connectNodeAdapter, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContractService, EchoRequestSchema } from "../../gen/warroom/contract/v1/contract_pb.js";
import { createDirectTransport } from "../../services/runtime/transport/direct-transport.js";
import { createMethodRegistry } from "../../services/runtime/transport/unary-call.js";
import { listenHttp, type HttpServer } from "../../services/runtime/http/http-server.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { headers as natsHeaders, type Msg } from "@nats-io/nats-core";
import { createNatsTransport, partBytes, serveOverNats, subjectForPath } from "../../services/runtime/transport/nats-transport.js";
import { INTERNAL_MESSAGE_MAX_BYTES } from "../../services/runtime/transport/message-limits.js";
import { requestIdServerInterceptor } from "../../services/runtime/http/request-context.js";
import { createSourceServer, type RunningSourceServer } from "../../services/remotesource-kit/index.js";
import { MAX_RESPONSE_BYTES } from "../../services/remotesource-kit/protocol/limits.js";
import { registerContractService, type HandlerRun } from "../support/contract-service.js";
import { startApp, type TestApp } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

const logger = createLogger("silent", "contract");
const LARGE = new Uint8Array(700 * 1024).map((_, i) => i % 251);

let nc: NatsConnection;
let sharedNats: PrivateNats;
let server: HttpServer;
const transports: Record<string, Transport> = {};
/** Every handler run of the direct and NATS servers, to tell whether a handler ran at all. */
const runs: Record<"direct" | "nats", HandlerRun[]> = { direct: [], nats: [] };

/** A transport bound later: a handler's own client, calling back into the same server. */
function later(name: string): Transport {
  return { unary: (...args) => transports[name]!.unary(...args), stream: (...args) => transports[name]!.stream(...args) };
}

beforeAll(async () => {
  // The runtime's server interceptor: it adopts the caller's deadline for the calls a handler makes.
  const natsRegistry = createMethodRegistry();
  registerContractService(natsRegistry.router, { next: later("nats"), runs: runs.nats });
  const registry = createMethodRegistry();
  registerContractService(registry.router, { next: later("direct"), runs: runs.direct });
  transports.direct = createDirectTransport(registry, { serverInterceptors: [requestIdServerInterceptor()] });

  sharedNats = await startPrivateNats();
  nc = await connect({ servers: sharedNats.url });
  serveOverNats(nc, natsRegistry, { logger, interceptors: [requestIdServerInterceptor()] });
  transports.nats = createNatsTransport(nc);

  const adapter = connectNodeAdapter({ routes: registerContractService });
  server = await listenHttp({ host: "127.0.0.1", port: 0, handler: adapter as never });
  const baseUrl = `http://127.0.0.1:${server.port}`;
  transports["http connect-json"] = createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: false });
  transports["http2 grpc"] = createGrpcTransport({ baseUrl });
});

afterAll(async () => {
  await nc?.drain();
  await sharedNats?.cleanup();
  await server?.close(100);
});

/** A handler's domain error reaches the caller with its code, message, metadata and details. */
async function expectDomainErrorCarried(transport: Transport): Promise<void> {
  const err = await createClient(ContractService, transport)
    .echo({ failCode: Code.NotFound, failMessage: "no such thing" })
    .then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
  expect(err?.code).toBe(Code.NotFound);
  expect(err?.rawMessage).toBe("no such thing");
  expect(err?.metadata.get("x-contract-reason")).toBe("asked");
  expect(err?.findDetails(EchoRequestSchema)[0]?.failMessage).toBe("detail");
}

describe.each(["direct", "nats", "http connect-json", "http2 grpc"])("the transport contract over %s", (name) => {
  const client = () => createClient(ContractService, transports[name]!);

  it("carries a unary call, its payload and its headers", async () => {
    const res = await client().echo({ payload: new TextEncoder().encode("hello") }, { headers: { "x-contract-request-id": "r-1" } });
    expect(new TextDecoder().decode(res.payload)).toBe("hello");
    expect(res.headers["x-contract-request-id"]).toBe("r-1");
  });

  it("carries back a domain error's code, message, metadata and details", async () => {
    await expectDomainErrorCarried(transports[name]!);
  });

  it("propagates the deadline and answers DeadlineExceeded when it passes", async () => {
    // The handler sees the caller's deadline, less the time on the way (never the 15 s default);
    // how much less depends on the machine's load, so only its bounds are checked.
    const seen = await client().echo({}, { timeoutMs: 5000 });
    expect(seen.timeoutMs).toBeGreaterThan(0);
    expect(seen.timeoutMs).toBeLessThanOrEqual(5000);
    const started = Date.now();
    const err = await client()
      .echo({ delayMs: 60_000 }, { timeoutMs: 150 })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.DeadlineExceeded);
    // A hang detector: the call ends at its 150 ms deadline; 10 s means it waited for the handler's 60 s.
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("carries a large message intact", async () => {
    const res = await client().echo({ payload: LARGE });
    expect(res.payload.byteLength).toBe(LARGE.byteLength);
    expect(Buffer.from(res.payload).equals(Buffer.from(LARGE))).toBe(true);
  });
});

describe.each(["direct", "nats"] as const)("the internal message limit and deadlines over %s", (name) => {
  const client = () => createClient(ContractService, transports[name]!);
  const LIMIT = INTERNAL_MESSAGE_MAX_BYTES;
  // A bytes field of n bytes encodes as 1 tag byte, a 4-byte length (n >= 2^21) and n bytes.
  const payloadFor = (messageBytes: number) => messageBytes - 5;

  it("carries a request and a reply larger than one NATS message", async () => {
    const big = new Uint8Array(3 * 1024 * 1024 + 17).map((_, i) => (i * 7) % 253);
    expect(big.byteLength).toBeGreaterThan(partBytes(nc));
    const res = await client().echo({ payload: big });
    expect(Buffer.from(res.payload).equals(Buffer.from(big))).toBe(true);
  });

  it("answers a reply just over the limit with ResourceExhausted, and one at the limit in full", async () => {
    const over = await client()
      .echo({ replyBytes: payloadFor(LIMIT + 1) })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(over?.code).toBe(Code.ResourceExhausted);
    expect(over?.rawMessage).toMatch(/over the internal message limit/);
    const at = await client().echo({ replyBytes: payloadFor(LIMIT) });
    expect(at.payload.byteLength).toBe(payloadFor(LIMIT));
  });

  it("refuses a request over the limit with ResourceExhausted before the handler runs", async () => {
    const before = runs[name].length;
    const err = await client()
      .echo({ payload: new Uint8Array(payloadFor(LIMIT + 1)) })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect(runs[name].length).toBe(before);
  });

  it("gives a call made by a handler the caller's remaining budget, and aborts it when the caller gives up", async () => {
    const started = Date.now();
    const err = await client()
      .echo({ forwardDelayMs: 60_000 }, { timeoutMs: 400 })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.DeadlineExceeded);
    // Hang detectors, 25 times the 400 ms deadline: the inner call's 60 s is what they catch.
    expect(Date.now() - started).toBeLessThan(10_000);
    const hangAt = Date.now() + 10_000;
    while (runs[name].at(-1)?.abortedAfterMs === undefined && Date.now() < hangAt) await new Promise((r) => setTimeout(r, 50));
    const inner = runs[name].at(-1)!;
    // The inner call had no deadline of its own: it got what was left of the caller's 400 ms.
    expect(inner.timeoutMs).toBeGreaterThan(0);
    expect(inner.timeoutMs).toBeLessThanOrEqual(400);
    // ... and its handler saw its signal abort then, not after its 60 s (or the 15 s default).
    expect(inner.abortedAfterMs).toBeDefined();
    expect(inner.abortedAfterMs!).toBeLessThan(10_000);
  });
});

describe("NATS-specific answers", () => {
  it("refuses a request announced over the limit before asking for its parts or running the handler", async () => {
    const before = runs.nats.length;
    const h = natsHeaders();
    h.set("Wr-Parts", "40");
    h.set("Wr-Size", String(INTERNAL_MESSAGE_MAX_BYTES + 1));
    h.set("content-type", "application/proto");
    const reply = await nc.request("rpc.warroom.contract.v1.ContractService.Echo", new Uint8Array(10), { timeout: 2000, headers: h });
    expect(reply.headers?.get("Connect-Http-Status")).toBe("429");
    expect(JSON.parse(new TextDecoder().decode(reply.data))).toMatchObject({ code: "resource_exhausted" });
    expect(reply.headers?.get("Wr-Continue")).toBe("");
    expect(runs.nats.length).toBe(before);
  });

  it("takes the replies of concurrent calls on one subscription, each to its own caller", async () => {
    const caller = await connect({ servers: sharedNats.url });
    let subscriptions = 0;
    // The caller's connection, counting the subscriptions the transport makes on it.
    const counted = new Proxy(caller, {
      get(target, key) {
        const value = Reflect.get(target, key);
        if (key === "subscribe") {
          return (...args: Parameters<NatsConnection["subscribe"]>) => {
            subscriptions++;
            return target.subscribe(...args);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    try {
      const client = createClient(ContractService, createNatsTransport(counted));
      const payload = (text: string) => new TextEncoder().encode(text);
      const texts = Array.from({ length: 100 }, (_, i) => `call ${i}`);
      const answers = await Promise.all(texts.map((text) => client.echo({ payload: payload(text), delayMs: Math.floor(Math.random() * 20) })));
      expect(answers.map((a) => new TextDecoder().decode(a.payload))).toEqual(texts);
      expect(new TextDecoder().decode((await client.echo({ payload: payload("one more") })).payload)).toBe("one more");
      expect(subscriptions).toBe(1);
    } finally {
      await caller.close();
    }
  });

  it("answers Unavailable with a clear message when nobody serves the method", async () => {
    const privateNats = await startPrivateNats();
    const lonely = await connect({ servers: privateNats.url });
    try {
      const err = await createClient(ContractService, createNatsTransport(lonely))
        .echo({}, { timeoutMs: 2000 })
        .then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
      expect(err?.code).toBe(Code.Unavailable);
      expect(err?.rawMessage).toBe("no service is answering /warroom.contract.v1.ContractService/Echo");
    } finally {
      await lonely.close();
      await privateNats.cleanup();
    }
  });

  it("answers DeadlineExceeded when the server is reachable but the reply never comes", async () => {
    const privateNats = await startPrivateNats();
    const caller = await connect({ servers: privateNats.url });
    const silent = await connect({ servers: privateNats.url });
    try {
      // A subscriber that swallows the request: NATS sees a responder, but none answers.
      silent.subscribe("rpc.warroom.contract.v1.ContractService.Echo", { callback: () => {} });
      await silent.flush();
      const err = await createClient(ContractService, createNatsTransport(caller))
        .echo({}, { timeoutMs: 200 })
        .then(
          () => undefined,
          (e: unknown) => ConnectError.from(e),
        );
      expect(err?.code).toBe(Code.DeadlineExceeded);
    } finally {
      await caller.close();
      await silent.close();
      await privateNats.cleanup();
    }
  });

  it("refuses streaming methods with a clear error", async () => {
    const client = createClient(ContractService, transports.nats!);
    const err = await (async () => {
      for await (const _ of client.echoStream({})) {
        /* unreachable */
      }
    })().then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.Unimplemented);
    expect(err?.rawMessage).toMatch(/streaming RPCs are not carried over the NATS transport/);
  });
});

/**
 * The previous release's ends, as it ran them: Connect's own client over a NATS request, and
 * Connect's own handler answering one. During a rolling upgrade each calls the other release's
 * end, so the wire must be the same both ways.
 */
function connectClientOverNats(caller: NatsConnection): Transport {
  return createTransport({
    baseUrl: "nats://rpc",
    useBinaryFormat: true,
    interceptors: [],
    acceptCompression: [],
    sendCompression: null,
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    readMaxBytes: INTERNAL_MESSAGE_MAX_BYTES,
    writeMaxBytes: INTERNAL_MESSAGE_MAX_BYTES,
    httpClient: async (request) => {
      const chunks: Uint8Array[] = [];
      for await (const chunk of request.body ?? []) chunks.push(chunk);
      const h = natsHeaders();
      for (const [key, value] of request.header) h.set(key, value);
      const reply = await caller.request(subjectForPath(new URL(request.url).pathname), Buffer.concat(chunks), { headers: h, timeout: 5000 });
      const header = new Headers();
      for (const key of reply.headers?.keys() ?? []) if (key !== "Connect-Http-Status") header.set(key, reply.headers!.get(key));
      return {
        status: Number(reply.headers?.get("Connect-Http-Status") || 200),
        header,
        body: (async function* () {
          yield reply.data;
        })(),
        trailer: new Headers(),
      };
    },
  });
}

function serveWithConnectHandlers(server: NatsConnection): void {
  const router = createConnectRouter();
  registerContractService(router);
  for (const handler of router.handlers) {
    if (handler.method.methodKind !== "unary") continue;
    server.subscribe(subjectForPath(handler.requestPath), {
      callback: (_err, msg) => void answerWithConnect(handler, msg),
    });
  }
}

async function answerWithConnect(handler: UniversalHandler, msg: Msg): Promise<void> {
  const header = new Headers();
  for (const key of msg.headers?.keys() ?? []) header.set(key, msg.headers!.get(key));
  const response = await handler({
    httpVersion: "1.1",
    url: `nats://rpc${handler.requestPath}`,
    method: "POST",
    header,
    body: (async function* () {
      yield msg.data;
    })(),
    signal: new AbortController().signal,
  });
  const chunks: Uint8Array[] = [];
  for await (const chunk of response.body ?? []) chunks.push(chunk);
  const h = natsHeaders();
  for (const [key, value] of response.header ?? []) h.set(key, value);
  for (const [key, value] of response.trailer ?? []) h.set(`trailer-${key}`, value);
  h.set("Connect-Http-Status", String(response.status));
  msg.respond(Buffer.concat(chunks), { headers: h });
}

describe("over NATS, this release and the previous one call each other", () => {
  let privateNats: PrivateNats;
  let oldServer: NatsConnection;
  let newServer: NatsConnection;
  let caller: NatsConnection;

  beforeAll(async () => {
    privateNats = await startPrivateNats();
    oldServer = await connect({ servers: privateNats.url });
    newServer = await connect({ servers: privateNats.url });
    caller = await connect({ servers: privateNats.url });
  });

  afterAll(async () => {
    await Promise.all([oldServer, newServer, caller].map((c) => c?.close()));
    await privateNats?.cleanup();
  });

  async function exercise(transport: Transport): Promise<void> {
    const client = createClient(ContractService, transport);
    const res = await client.echo({ payload: new TextEncoder().encode("across releases") }, { headers: { "x-contract-request-id": "r-9" }, timeoutMs: 4000 });
    expect(new TextDecoder().decode(res.payload)).toBe("across releases");
    expect(res.headers["x-contract-request-id"]).toBe("r-9");
    // The caller's 4 s, less the time on the way (never the 15 s default).
    expect(res.timeoutMs).toBeGreaterThan(0);
    expect(res.timeoutMs).toBeLessThanOrEqual(4000);
    await expectDomainErrorCarried(transport);
  }

  it("a caller of the previous release gets this release's answers and errors", async () => {
    const registry = createMethodRegistry();
    registerContractService(registry.router);
    const server = serveOverNats(newServer, registry, { logger });
    await newServer.flush();
    try {
      await exercise(connectClientOverNats(caller));
    } finally {
      await server.drain(1000);
    }
  });

  it("this release's caller gets the previous release's answers and errors", async () => {
    serveWithConnectHandlers(oldServer);
    await oldServer.flush();
    await exercise(createNatsTransport(caller));
  });
});

describe("a plain @grpc/grpc-js client", () => {
  it("calls the same service over HTTP/2 cleartext", async () => {
    const definition = protoLoader.loadSync("warroom/contract/v1/contract.proto", { includeDirs: [join(process.cwd(), "proto")] });
    const pkg = grpc.loadPackageDefinition(definition) as any;
    const client = new pkg.warroom.contract.v1.ContractService(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    try {
      const res = await new Promise<any>((resolve, reject) =>
        client.Echo({ payload: Buffer.from("grpc-js") }, (err: Error | null, value: unknown) => (err ? reject(err) : resolve(value))),
      );
      expect(Buffer.from(res.payload).toString()).toBe("grpc-js");
      const err = await new Promise<any>((resolve) => client.Echo({ failCode: Code.PermissionDenied, failMessage: "nope" }, (e: unknown) => resolve(e)));
      expect(err.code).toBe(grpc.status.PERMISSION_DENIED);
      expect(err.details).toBe("nope");
      const late = await new Promise<any>((resolve) => client.Echo({ delayMs: 2000 }, { deadline: new Date(Date.now() + 150) }, (e: unknown) => resolve(e)));
      expect(late.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    } finally {
      client.close();
    }
  });
});

describe("a 4 MiB remote-source read in NATS mode", () => {
  let app: TestApp;
  let source: RunningSourceServer;
  const TOKEN = "contract-source-token";
  const T0 = Date.parse("2024-05-01T00:00:00Z");

  beforeAll(async () => {
    // A Prometheus-style range answer just under the spec's 4 MiB: the provider's matrix verbatim
    // (raw) and the shaped series beside it, as a real source answers.
    const points = 60_000;
    const values = Array.from({ length: points }, (_, i) => [T0 / 1000 + i * 15, String((i % 1000) / 7)]);
    source = await createSourceServer({
      source: "prometheus-like",
      kinds: ["metrics"],
      auth: { bearerTokens: [TOKEN] },
      operations: [],
      metrics: {
        list: async () => ({ raw: ["cpu"] }),
        range: async (call) => {
          const n = Number(call.expr.replace(/\D/g, "")) || points;
          return {
            raw: { status: "success", data: { resultType: "matrix", result: [{ metric: { __name__: "cpu", host: "db-1" }, values: values.slice(0, n) }] } },
            series: [{ label: 'cpu{host="db-1"}', points: values.slice(0, n).map(([t, v]) => ({ t: (t as number) * 1000, v: Number(v) })) }],
          };
        },
      },
    }).listen();
    app = await startApp({
      nats: true,
      env: {
        REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32",
        REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1",
        SECRETS_KEYS: `test1:${Buffer.alloc(32, 9).toString("base64")}`,
      },
    });
  });

  afterAll(async () => {
    await app?.stop();
    await source?.close();
  });

  it("crosses the bus whole, several times NATS's default max_payload", async () => {
    const owner = await app.ownerToken();
    const created = await app.call("POST", "/o/acme/remote-sources", {
      token: owner,
      body: { name: "big", baseUrl: source.url, transport: "http", auth: { bearerToken: TOKEN }, tenantRef: "t" },
    });
    expect(created.status).toBe(201);
    // Find the largest answer the source gives under 4 MiB.
    let best: { status: number; body: any } | undefined;
    for (const n of [60_000, 56_000, 52_000, 50_000, 48_000, 46_000, 44_000, 42_000, 40_000]) {
      const read = await app.call("POST", `/o/acme/remote-sources/${created.body.id}/read`, {
        token: owner,
        body: { call: "metrics/range", request: { expr: `cpu${n}`, window: { fromMs: T0, toMs: T0 + n * 15_000 } } },
      });
      expect(read.status).toBe(200);
      if (!read.body.partial) {
        best = read;
        break;
      }
      expect(read.body.error).toBe("response too large");
    }
    expect(best).toBeDefined();
    const bytes = Buffer.byteLength(JSON.stringify({ ...best!.body }));
    expect(bytes).toBeGreaterThan(3.5 * 1024 * 1024);
    expect(bytes).toBeLessThanOrEqual(MAX_RESPONSE_BYTES + 64 * 1024);
    expect(best!.body.series[0].points.length).toBe(best!.body.raw.data.result[0].values.length);
  });
});
