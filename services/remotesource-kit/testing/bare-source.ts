import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  CapabilitiesResponseSchema,
  HealthResponseSchema,
  type OperationDescriptorSchema,
  RawResultSchema,
  SourceService,
  type InvokeRequest,
  type MetricsRangeRequest,
} from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";

/**
 * A remote source written without the kit, the way a third party might: a plain node:http server
 * for HTTP-JSON with hand-built JSON, and a bare gRPC server. Each fault breaks one rule of the
 * protocol, so tests can see the conformance check and the client catch it.
 */
export interface BareSourceFaults {
  /** Health answers ok without a credential (or with an empty one). */
  healthAcceptsEmptyCredential?: boolean;
  /** metrics/range returns its points newest first. */
  unsortedSeries?: boolean;
  /**
   * metrics/range over HTTP breaks rule 7 in its JSON: `strings` gives values as strings ("42"),
   * `infinity` as "Infinity", `epochTimes` times as epoch seconds.
   */
  seriesJson?: "strings" | "infinity" | "epochTimes";
  /** Health answers `{ ok: false, detail }` (with a good credential). */
  healthReportsDown?: boolean;
  /** Every read answers a 5 MiB payload. */
  hugeResponse?: boolean;
  /** 401 (gRPC UNAUTHENTICATED) on every call. */
  rejectEveryCall?: boolean;
  protocolVersion?: string;
  /** capabilities lists an operation `ghost` that invoke answers 404 for. */
  advertisedOperationMissing?: boolean;
  /**
   * capabilities also lists `search`, a windowed logs operation whose window names `from` and
   * `to` while its params hints list only `query` (what a source written from the spec may do).
   */
  windowOutsideParams?: boolean;
}

export interface RecordedCall {
  transport: "http" | "grpc";
  call: string;
  authorization: string | undefined;
  body: unknown;
}

export interface BareSource {
  httpUrl: string;
  grpcUrl: string;
  token: string;
  calls: RecordedCall[];
  close(): Promise<void>;
}

const FIVE_MIB = 5 * 1024 * 1024;

/**
 * Test-only: starts the bare source (HTTP-JSON and gRPC) with the faults asked for; answers its
 * URLs and the calls it has recorded.
 */
export async function startBareSource(faults: BareSourceFaults = {}, token = "bare-source-token"): Promise<BareSource> {
  const calls: RecordedCall[] = [];
  const operations: MessageInitShape<typeof OperationDescriptorSchema>[] = [
    { operation: "cpu", description: "CPU seconds of a host", params: { host: "host name" }, kind: "metrics" },
    ...(faults.advertisedOperationMissing ? [{ operation: "ghost", description: "listed, never served", params: {}, kind: "metrics" }] : []),
    ...(faults.windowOutsideParams
      ? [
          {
            operation: "search",
            description: "log search",
            params: { query: "search expression" },
            kind: "logs",
            window: { start: "from", end: "to", format: "epoch-ms" },
          },
        ]
      : []),
  ];
  const capabilities = { protocolVersion: faults.protocolVersion ?? "1", source: "bare", kinds: ["metrics"], operations };

  function allowed(call: string, authorization: string | undefined): boolean {
    if (faults.rejectEveryCall) return false;
    if (call === "health" && faults.healthAcceptsEmptyCredential && (!authorization || authorization.trim() === "Bearer" || authorization.trim() === ""))
      return true;
    return authorization === `Bearer ${token}`;
  }

  function points(): Array<{ t: string; v: number }> {
    const base = Date.parse("2024-05-01T12:00:00Z");
    const list = [0, 1, 2, 3].map((i) => ({ t: new Date(base + i * 60_000).toISOString(), v: i * 1.5 }));
    return faults.unsortedSeries ? list.reverse() : list;
  }

  function jsonPoints(): Array<{ t: unknown; v: unknown }> {
    const list = points();
    if (faults.seriesJson === "strings") return list.map((p) => ({ t: p.t, v: String(p.v) }));
    if (faults.seriesJson === "infinity") return list.map((p, i) => ({ t: p.t, v: i === 1 ? "Infinity" : p.v }));
    if (faults.seriesJson === "epochTimes") return list.map((p) => ({ t: Date.parse(p.t) / 1000, v: p.v }));
    return list;
  }

  function rawPayload(name: string): unknown {
    return faults.hugeResponse ? { name, padding: "x".repeat(FIVE_MIB) } : { name, values: [1, 2, 3] };
  }

  // -- HTTP-JSON, by hand ---------------------------------------------------------------------
  const httpServer = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = new URL(req.url ?? "/", "http://bare.invalid").pathname;
      const call = path.replace(/^\/v1\//, "");
      let body: Record<string, unknown> = {};
      try {
        body = chunks.length > 0 ? (JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>) : {};
      } catch {
        body = {};
      }
      calls.push({ transport: "http", call, authorization: req.headers.authorization, body });
      const send = (status: number, value: unknown) => {
        const text = JSON.stringify(value);
        res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
        res.end(text);
      };
      if (!allowed(call, req.headers.authorization)) return send(401, { error: "unauthorized" });
      const envelope = (operation: string, params: unknown, extra: Record<string, unknown> = {}) => ({
        source: "bare",
        operation,
        params,
        fetchedAt: new Date().toISOString(),
        raw: rawPayload(operation),
        partial: false,
        error: null,
        ...extra,
      });
      const { tenant: _tenant, ...params } = body;
      switch (`${req.method} ${path}`) {
        case "GET /v1/capabilities":
          return send(200, capabilities);
        case "GET /v1/health":
          return send(200, faults.healthReportsDown ? { ok: false, detail: "replica lagging" } : { ok: true });
        case "POST /v1/invoke":
          if (faults.windowOutsideParams && body.operation === "search") return send(200, envelope("search", body.params ?? {}));
          if (body.operation !== "cpu") return send(404, { error: `unknown operation ${JSON.stringify(body.operation)}` });
          return send(200, envelope("cpu", body.params ?? {}));
        case "POST /v1/metrics/list":
          return send(200, envelope("metrics/list", params));
        case "POST /v1/metrics/range":
          return send(200, envelope("metrics/range", params, { series: [{ label: 'cpu{host="a"}', unit: "s", points: jsonPoints() }] }));
        default:
          return send(404, { error: "not found" });
      }
    });
  });

  // -- gRPC, on the generated schema ------------------------------------------------------------
  const check = (call: string, ctx: HandlerContext, request: unknown) => {
    const authorization = ctx.requestHeader.get("authorization") ?? undefined;
    calls.push({ transport: "grpc", call, authorization, body: request });
    if (!allowed(call, authorization)) throw new ConnectError("unauthorized", Code.Unauthenticated);
  };
  const result = (operation: string, extra: Partial<{ series: Array<{ label: string; points: Array<{ t: string; v: number }> }> }> = {}) =>
    create(RawResultSchema, {
      source: "bare",
      operation,
      params: {},
      fetchedAt: new Date().toISOString(),
      raw: JSON.stringify(rawPayload(operation)),
      partial: false,
      ...extra,
    });
  const grpcHandler = connectNodeAdapter({
    grpc: true,
    grpcWeb: false,
    connect: false,
    writeMaxBytes: 16 * 1024 * 1024,
    routes(router) {
      router.service(SourceService, {
        capabilities(request, ctx) {
          check("capabilities", ctx, request);
          return create(CapabilitiesResponseSchema, capabilities);
        },
        health(request, ctx) {
          check("health", ctx, request);
          return create(HealthResponseSchema, faults.healthReportsDown ? { ok: false, detail: "replica lagging" } : { ok: true });
        },
        invoke(request: InvokeRequest, ctx) {
          check("invoke", ctx, request);
          if (faults.windowOutsideParams && request.operation === "search") return result("search");
          if (request.operation !== "cpu") throw new ConnectError(`unknown operation ${JSON.stringify(request.operation)}`, Code.NotFound);
          return result("cpu");
        },
        metricsList(request, ctx) {
          check("metrics/list", ctx, request);
          return result("metrics/list");
        },
        metricsRange(request: MetricsRangeRequest, ctx) {
          check("metrics/range", ctx, request);
          return result("metrics/range", { series: [{ label: 'cpu{host="a"}', points: points() }] });
        },
        logsStreams(request, ctx) {
          check("logs/streams", ctx, request);
          throw new ConnectError("no logs here", Code.NotFound);
        },
        logsRange(request, ctx) {
          check("logs/range", ctx, request);
          throw new ConnectError("no logs here", Code.NotFound);
        },
      });
    },
  });
  const grpcServer = http2.createServer({}, grpcHandler);

  await new Promise<void>((resolve) => httpServer.listen(0, "127.0.0.1", resolve));
  await new Promise<void>((resolve) => grpcServer.listen(0, "127.0.0.1", resolve));
  const sessions = new Set<http2.ServerHttp2Session>();
  grpcServer.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  return {
    httpUrl: `http://127.0.0.1:${(httpServer.address() as AddressInfo).port}`,
    grpcUrl: `http://127.0.0.1:${(grpcServer.address() as AddressInfo).port}`,
    token,
    calls,
    async close() {
      httpServer.closeAllConnections();
      for (const s of sessions) s.destroy();
      await Promise.all([new Promise<void>((resolve) => httpServer.close(() => resolve())), new Promise<void>((resolve) => grpcServer.close(() => resolve()))]);
    },
  };
}
