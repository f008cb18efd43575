import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code, ConnectError, createClient, createConnectRouter, type Transport } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContractService, EchoRequestSchema } from "../../gen/warroom/contract/v1/contract_pb.js";
import { createDirectRegistry, createDirectTransport } from "../../services/runtime/direct-transport.js";
import { listenHttp, type HttpServer } from "../../services/runtime/http-server.js";
import { createLogger } from "../../services/runtime/logger.js";
import { createNatsTransport, serveRouterOverNats } from "../../services/runtime/nats-transport.js";
import { registerContractService } from "../support/contract-service.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

const logger = createLogger("silent", "contract");
const LARGE = new Uint8Array(700 * 1024).map((_, i) => i % 251);

let nc: NatsConnection;
let sharedNats: PrivateNats;
let server: HttpServer;
const transports: Record<string, Transport> = {};

beforeAll(async () => {
  const router = createConnectRouter();
  registerContractService(router);
  const registry = createDirectRegistry();
  registerContractService(registry.router);
  transports.direct = createDirectTransport(registry);

  sharedNats = await startPrivateNats();
  nc = await connect({ servers: sharedNats.url });
  serveRouterOverNats(nc, router, { logger });
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

describe.each(["direct", "nats", "http connect-json", "http2 grpc"])("the transport contract over %s", (name) => {
  const client = () => createClient(ContractService, transports[name]!);

  it("carries a unary call, its payload and its headers", async () => {
    const res = await client().echo({ payload: new TextEncoder().encode("hello") }, { headers: { "x-contract-request-id": "r-1" } });
    expect(new TextDecoder().decode(res.payload)).toBe("hello");
    expect(res.headers["x-contract-request-id"]).toBe("r-1");
  });

  it("carries back a domain error's code, message, metadata and details", async () => {
    const err = await client()
      .echo({ failCode: Code.NotFound, failMessage: "no such thing" })
      .then(() => undefined, (e: unknown) => ConnectError.from(e));
    expect(err?.code).toBe(Code.NotFound);
    expect(err?.rawMessage).toBe("no such thing");
    expect(err?.metadata.get("x-contract-reason")).toBe("asked");
    expect(err?.findDetails(EchoRequestSchema)[0]?.failMessage).toBe("detail");
  });

  it("propagates the deadline and answers DeadlineExceeded when it passes", async () => {
    const seen = await client().echo({}, { timeoutMs: 5000 });
    expect(seen.timeoutMs).toBeGreaterThan(4000);
    expect(seen.timeoutMs).toBeLessThanOrEqual(5000);
    const started = Date.now();
    const err = await client()
      .echo({ delayMs: 2000 }, { timeoutMs: 150 })
      .then(() => undefined, (e: unknown) => ConnectError.from(e));
    expect(err?.code).toBe(Code.DeadlineExceeded);
    expect(Date.now() - started).toBeLessThan(1500);
  });

  it("carries a large message intact", async () => {
    const res = await client().echo({ payload: LARGE });
    expect(res.payload.byteLength).toBe(LARGE.byteLength);
    expect(Buffer.from(res.payload).equals(Buffer.from(LARGE))).toBe(true);
  });
});

describe("NATS-specific answers", () => {
  it("answers Unavailable with a clear message when nobody serves the method", async () => {
    const privateNats = await startPrivateNats();
    const lonely = await connect({ servers: privateNats.url });
    try {
      const err = await createClient(ContractService, createNatsTransport(lonely))
        .echo({}, { timeoutMs: 2000 })
        .then(() => undefined, (e: unknown) => ConnectError.from(e));
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
        .then(() => undefined, (e: unknown) => ConnectError.from(e));
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
    })().then(() => undefined, (e: unknown) => ConnectError.from(e));
    expect(err?.code).toBe(Code.Unimplemented);
    expect(err?.rawMessage).toMatch(/streaming RPCs are not carried over the NATS transport/);
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
      const err = await new Promise<any>((resolve) =>
        client.Echo({ failCode: Code.PermissionDenied, failMessage: "nope" }, (e: unknown) => resolve(e)),
      );
      expect(err.code).toBe(grpc.status.PERMISSION_DENIED);
      expect(err.details).toBe("nope");
      const late = await new Promise<any>((resolve) =>
        client.Echo({ delayMs: 2000 }, { deadline: new Date(Date.now() + 150) }, (e: unknown) => resolve(e)),
      );
      expect(late.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    } finally {
      client.close();
    }
  });
});
