import http from "node:http";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../runtime/observability/logger.js";
import { internalServices } from "../runtime/transport/clients.js";
import { createRestGateway } from "./rest-gateway.js";
import { buildRouteTable } from "./route-table.js";

/** What the gateway handed the transport, and a way to answer the call. */
interface SeenCall {
  signal: AbortSignal;
  timeoutMs: number | undefined;
  answer(): void;
}

describe("the REST gateway's call signal", () => {
  const calls: SeenCall[] = [];
  const arrived: Array<() => void> = [];
  // A transport that holds each call until the test answers it, and gives up when its signal aborts.
  const transport = {
    unary: (method, signal, timeoutMs) =>
      new Promise((resolve, reject) => {
        signal!.addEventListener("abort", () => reject(new ConnectError("the call was canceled", Code.Canceled)), { once: true });
        calls.push({ signal: signal!, timeoutMs, answer: () => resolve({ message: create(method.output) } as never) });
        arrived.shift()?.();
      }),
    stream: () => Promise.reject(new Error("no streams")),
  } as Transport;
  const gateway = createRestGateway({ routes: buildRouteTable(internalServices), transport, logger: createLogger("silent", "test") });
  const server = http.createServer((req, res) => {
    void gateway(req, res, new URL(req.url!, "http://localhost"));
  });
  let port = 0;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const nextCall = () => new Promise<void>((resolve) => arrived.push(resolve));

  it("is aborted when the client goes away before its answer, and the call is canceled", async () => {
    const entered = nextCall();
    const req = http.get({ port, path: "/o/acme/heartbeats" });
    req.on("error", () => {});
    await entered;
    const call = calls.at(-1)!;
    expect(call.timeoutMs).toBe(15_000);
    expect(call.signal.aborted).toBe(false);
    req.destroy();
    await new Promise((resolve) => call.signal.addEventListener("abort", resolve, { once: true }));
    expect((call.signal.reason as DOMException).name).toBe("AbortError");
  });

  it("is never aborted by an answered call, nor after its answer", async () => {
    const entered = nextCall();
    const answered = new Promise<number>((resolve) => http.get({ port, path: "/o/acme/heartbeats" }, (res) => resolve(res.resume().statusCode!)));
    await entered;
    const call = calls.at(-1)!;
    call.answer();
    expect(await answered).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(call.signal.aborted).toBe(false);
  });
});
