import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import http2, { type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
import type net from "node:net";
import type { AddressInfo, Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { create, toBinary, type DescMessage, type JsonObject, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  CapabilitiesResponseSchema,
  HealthResponseSchema,
  OperationDescriptorSchema,
  RawResultSchema,
  SourceService,
  type CapabilitiesResponse,
  type HealthResponse,
  type InvokeRequest,
  type LogsRangeRequest,
  type LogsStreamsRequest,
  type MetricsListRequest,
  type MetricsRangeRequest,
  type OperationDescriptor,
  type RawResult,
} from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import {
  CANONICAL_ROLES,
  DESCRIPTOR_KINDS,
  MAX_REQUEST_BYTES,
  MAX_RESPONSE_BYTES,
  PROTOCOL_VERSION,
  RESPONSE_TOO_LARGE,
  WINDOW_FORMATS,
} from "../protocol/limits.js";
import { encodeProtocolJson, fromProtocolJson, ProtocolJsonError, rawText, toProtocolJson } from "../protocol/protocol-json.js";
import { PROTOCOL_ROUTES, type ProtocolCall } from "../protocol/protocol-routes.js";
import { listenHttp } from "../../runtime/http-server.js";
import { sortByTime, toIsoTime, type TimeInput } from "../protocol/shaped-data.js";

// ---------------------------------------------------------------------------------------------
// What a source gives the kit.

export type SourceKind = "metrics" | "logs";
export type DescriptorKind = (typeof DESCRIPTOR_KINDS)[number];
export type CanonicalRole = (typeof CANONICAL_ROLES)[number];
export type WindowFormat = (typeof WINDOW_FORMATS)[number];

/** Describes one operation in `capabilities` (the spec's OperationDescriptor). */
export interface OperationDescriptorInput {
  /** The source's own name for it, what `invoke` is called with. */
  operation: string;
  description: string;
  /** Parameter name to a hint for whoever calls it. */
  params?: Record<string, string>;
  kind: DescriptorKind;
  /** Which canonical call it backs, if any. */
  canonical?: CanonicalRole;
  /** Required for a windowed operation: the source's own names for the window parameters. */
  window?: {
    start: string;
    end: string;
    step?: string;
    format: WindowFormat;
    stepFormat?: string;
    minStepSeconds?: number;
  };
}

/** Passed to every handler. */
export interface CallContext {
  /** The caller's opaque per-connection reference (`tenant.ref`). */
  tenant: string;
  /** Aborted when the caller goes away. */
  signal: AbortSignal;
}

export interface SeriesInput {
  label: string;
  unit?: string;
  /** Times as ISO text, epoch milliseconds or Dates; the kit sends ISO 8601, sorted ascending. */
  points: Array<{ t: TimeInput; v: number }>;
}

export interface EntryInput {
  t: TimeInput;
  line: string;
  labels?: Record<string, string>;
  stream?: string;
}

/** What a handler answers: the provider payload verbatim, and the shaped form when it has one. */
export interface ReadResult {
  raw: JsonValue;
  series?: SeriesInput[];
  entries?: EntryInput[];
  /** True when the read is incomplete; say why in `error`. */
  partial?: boolean;
  error?: string;
}

export interface SourceOperation {
  descriptor: OperationDescriptorInput;
  handler(params: JsonObject, context: CallContext): Promise<ReadResult>;
}

export interface MetricsListCall {
  namespace?: string;
  match?: string;
}
export interface MetricsRangeCall {
  expr: string;
  fromMs: number;
  toMs: number;
  step?: string;
}
export interface LogsStreamsCall {
  prefix?: string;
  label?: string;
}
export interface LogsRangeCall {
  query: string;
  fromMs: number;
  toMs: number;
  limit?: number;
}

/** The canonical calls of kind `metrics`: POST /v1/metrics/list and /v1/metrics/range. */
export interface MetricsHandlers {
  list(call: MetricsListCall, context: CallContext): Promise<ReadResult>;
  range(call: MetricsRangeCall, context: CallContext): Promise<ReadResult>;
}

/** The canonical calls of kind `logs`: POST /v1/logs/streams and /v1/logs/range. */
export interface LogsHandlers {
  streams(call: LogsStreamsCall, context: CallContext): Promise<ReadResult>;
  range(call: LogsRangeCall, context: CallContext): Promise<ReadResult>;
}

/**
 * How callers prove who they are. Every call, health included, is refused without it.
 * - `bearerTokens`: `Authorization: Bearer <token>` (gRPC: `authorization` metadata) must carry one of them.
 * - `mtls`: the server speaks TLS with `cert`/`key` and accepts only client certificates issued by `ca`.
 */
export type SourceAuth = { bearerTokens: string[] } | { mtls: { ca: string | Buffer; cert: string | Buffer; key: string | Buffer } };

export interface SourceServerOptions {
  /** The source's own tag, echoed in every RawResult. */
  source: string;
  /** `metrics` needs `metrics` handlers, `logs` needs `logs` handlers; none means invoke only. */
  kinds: SourceKind[];
  operations?: SourceOperation[];
  metrics?: MetricsHandlers;
  logs?: LogsHandlers;
  auth: SourceAuth;
  /** Serve HTTPS (and gRPC over TLS) with bearer tokens. Mutual TLS always serves TLS. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** Whether the source can reach its provider; `{ok: true}` when left out. */
  health?(context: CallContext): Promise<{ ok: boolean; detail?: string }>;
  /** Responses of reads above this are cut to a partial result. Default and maximum: 4 MiB. */
  maxResponseBytes?: number;
  /** Called with a handler's unexpected error (answered as an opaque internal error). */
  onError?(error: unknown, call: string): void;
}

/** A failure a handler reports on purpose; the caller sees its message and a matching status. */
export class SourceError extends Error {
  constructor(
    readonly code: "invalid-argument" | "not-found" | "failed-precondition" | "resource-exhausted" | "unavailable" | "deadline-exceeded" | "internal",
    message: string,
  ) {
    super(message);
    this.name = "SourceError";
  }
}

const ERROR_CODES: Record<SourceError["code"], { status: number; grpc: Code }> = {
  "invalid-argument": { status: 400, grpc: Code.InvalidArgument },
  "not-found": { status: 404, grpc: Code.NotFound },
  "failed-precondition": { status: 412, grpc: Code.FailedPrecondition },
  "resource-exhausted": { status: 429, grpc: Code.ResourceExhausted },
  unavailable: { status: 503, grpc: Code.Unavailable },
  "deadline-exceeded": { status: 504, grpc: Code.DeadlineExceeded },
  internal: { status: 500, grpc: Code.Internal },
};

export interface RunningSourceServer {
  port: number;
  /** e.g. http://127.0.0.1:9400 or https://127.0.0.1:9400 */
  url: string;
  close(): Promise<void>;
}

export interface SourceServer {
  /** A request handler for node:http or node:http2 servers of your own. */
  handler(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse): void;
  /** Serves HTTP-JSON and gRPC on one port (HTTP/1.1 and HTTP/2; TLS when configured). */
  listen(options?: { port?: number; host?: string }): Promise<RunningSourceServer>;
}

// ---------------------------------------------------------------------------------------------

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

class Unauthenticated extends Error {}

/**
 * Builds a source of the remote source protocol, version 1: capabilities, health (fail-closed),
 * invoke and the canonical calls of the declared kinds, over HTTP-JSON and gRPC.
 */
export function createSourceServer(options: SourceServerOptions): SourceServer {
  const config = validateOptions(options);
  const { operations, descriptors, maxResponseBytes } = config;
  const onError = options.onError ?? ((error: unknown, call: string) => console.error(`source call ${call} failed:`, error));

  // -- authentication -------------------------------------------------------------------------
  const tokenDigests = "bearerTokens" in options.auth ? options.auth.bearerTokens.map(digest) : undefined;
  function authenticate(authorization: string | null | undefined, socket: Socket | undefined): void {
    if (tokenDigests) {
      const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(authorization ?? "");
      const presented = match?.[1] ? digest(match[1]) : undefined;
      // Every token is compared, in constant time, whatever the outcome.
      let ok = false;
      for (const token of tokenDigests) if (presented && timingSafeEqual(presented, token)) ok = true;
      if (!ok) throw new Unauthenticated(authorization ? "invalid credential" : "missing credential: send Authorization: Bearer <token>");
    } else if (!(socket as TLSSocket | undefined)?.authorized) {
      // The TLS layer already refuses a missing or untrusted client certificate; this is a second lock.
      throw new Unauthenticated("a trusted client certificate is required");
    }
  }

  // -- the calls, on schema messages ---------------------------------------------------------
  function context(tenant: string | undefined, signal: AbortSignal): CallContext {
    return { tenant: tenant ?? "", signal };
  }

  async function capabilities(): Promise<CapabilitiesResponse> {
    return create(CapabilitiesResponseSchema, {
      protocolVersion: PROTOCOL_VERSION,
      source: options.source,
      kinds: [...options.kinds],
      operations: descriptors,
    });
  }

  async function health(signal: AbortSignal): Promise<HealthResponse> {
    const answer = options.health ? await options.health(context("", signal)) : { ok: true };
    return create(HealthResponseSchema, answer.detail === undefined ? { ok: answer.ok } : { ok: answer.ok, detail: answer.detail });
  }

  async function invoke(request: InvokeRequest, signal: AbortSignal): Promise<RawResult> {
    const operation = operations.get(request.operation);
    if (!operation) throw new SourceError("not-found", `unknown operation ${JSON.stringify(request.operation)}`);
    const params = request.params ?? {};
    const result = await operation.handler(params, context(request.tenant?.ref, signal));
    return rawResult(request.operation, params, result);
  }

  function echo<Desc extends DescMessage>(schema: Desc, request: MessageShape<Desc>): JsonObject {
    const params = toProtocolJson(schema, request);
    delete params.tenant;
    return params;
  }

  function window(request: MetricsRangeRequest | LogsRangeRequest): { fromMs: number; toMs: number } {
    if (!request.window) throw new SourceError("invalid-argument", "window is required: {fromMs, toMs} in epoch milliseconds");
    const fromMs = Number(request.window.fromMs);
    const toMs = Number(request.window.toMs);
    if (toMs < fromMs) throw new SourceError("invalid-argument", "window.toMs must not be before window.fromMs");
    return { fromMs, toMs };
  }

  const canonical = {
    async "metrics/list"(request: MetricsListRequest, signal: AbortSignal, schema: DescMessage): Promise<RawResult> {
      const handlers = requireKind(options.metrics, "metrics/list");
      const call: MetricsListCall = {};
      if (request.namespace !== undefined) call.namespace = request.namespace;
      if (request.match !== undefined) call.match = request.match;
      const result = await handlers.list(call, context(request.tenant?.ref, signal));
      return rawResult("metrics/list", echo(schema, request as never), result);
    },
    async "metrics/range"(request: MetricsRangeRequest, signal: AbortSignal, schema: DescMessage): Promise<RawResult> {
      const handlers = requireKind(options.metrics, "metrics/range");
      if (!request.expr) throw new SourceError("invalid-argument", "expr is required");
      const call: MetricsRangeCall = { expr: request.expr, ...window(request) };
      if (request.step !== undefined) call.step = request.step;
      const result = await handlers.range(call, context(request.tenant?.ref, signal));
      return rawResult("metrics/range", echo(schema, request as never), result);
    },
    async "logs/streams"(request: LogsStreamsRequest, signal: AbortSignal, schema: DescMessage): Promise<RawResult> {
      const handlers = requireKind(options.logs, "logs/streams");
      const call: LogsStreamsCall = {};
      if (request.prefix !== undefined) call.prefix = request.prefix;
      if (request.label !== undefined) call.label = request.label;
      const result = await handlers.streams(call, context(request.tenant?.ref, signal));
      return rawResult("logs/streams", echo(schema, request as never), result);
    },
    async "logs/range"(request: LogsRangeRequest, signal: AbortSignal, schema: DescMessage): Promise<RawResult> {
      const handlers = requireKind(options.logs, "logs/range");
      const call: LogsRangeCall = { query: request.query, ...window(request) };
      if (request.limit !== undefined) {
        if (request.limit < 0) throw new SourceError("invalid-argument", "limit must not be negative");
        call.limit = request.limit;
      }
      const result = await handlers.range(call, context(request.tenant?.ref, signal));
      return rawResult("logs/range", echo(schema, request as never), result);
    },
  };

  function requireKind<T>(handlers: T | undefined, call: string): T {
    // Kinds are checked at start-up, so a missing handler means the kind is not declared.
    if (!handlers) throw new SourceError("not-found", `this source does not serve ${call}`);
    return handlers;
  }

  function rawResult(operation: string, params: JsonObject, result: ReadResult): RawResult {
    const series = (result.series ?? []).map((s) => ({
      label: s.label,
      ...(s.unit === undefined ? {} : { unit: s.unit }),
      // JSON has no NaN or Infinity: such points (a provider's "NaN") are left out.
      points: sortByTime(s.points.filter((p) => Number.isFinite(p.v)).map((p) => ({ t: toIsoTime(p.t), v: p.v }))),
    }));
    const entries = sortByTime(
      (result.entries ?? []).map((e) => ({
        t: toIsoTime(e.t),
        line: e.line,
        labels: e.labels ?? {},
        ...(e.stream === undefined ? {} : { stream: e.stream }),
      })),
    );
    const partial = result.partial === true || result.error !== undefined;
    return create(RawResultSchema, {
      source: options.source,
      operation,
      params,
      fetchedAt: new Date().toISOString(),
      raw: rawText(result.raw),
      partial,
      ...(partial ? { error: result.error ?? "partial result" } : {}),
      series,
      entries,
    });
  }

  /** The same envelope without the payload: what a read above the size limit becomes. */
  function tooLarge(result: RawResult): RawResult {
    return create(RawResultSchema, {
      source: result.source,
      operation: result.operation,
      params: result.params ?? {},
      fetchedAt: result.fetchedAt,
      raw: "",
      partial: true,
      error: RESPONSE_TOO_LARGE,
    });
  }

  async function dispatch(call: ProtocolCall, request: unknown, signal: AbortSignal, schema: DescMessage): Promise<unknown> {
    switch (call) {
      case "capabilities":
        return capabilities();
      case "health":
        return health(signal);
      case "invoke":
        return invoke(request as InvokeRequest, signal);
      default:
        return canonical[call](request as never, signal, schema);
    }
  }

  // -- HTTP-JSON ------------------------------------------------------------------------------
  const jsonRoutes = new Map(PROTOCOL_ROUTES.map((route) => [route.path, route]));

  async function serveJson(req: Request, res: Response, path: string): Promise<void> {
    const route = jsonRoutes.get(path)!;
    if (req.method !== route.httpMethod) {
      return sendJson(res, 405, { error: `use ${route.httpMethod} for ${path}` }, { allow: route.httpMethod });
    }
    try {
      authenticate(header(req, "authorization"), req.socket as Socket);
    } catch (err) {
      if (err instanceof Unauthenticated) return sendJson(res, 401, { error: err.message }, { "www-authenticate": "Bearer" });
      throw err;
    }
    let request: unknown;
    if (route.httpMethod === "POST") {
      const body = await readBody(req);
      if (body === "too-large") return sendJson(res, 413, { error: `request body is larger than ${MAX_REQUEST_BYTES} bytes` }, { connection: "close" });
      try {
        request = fromProtocolJson(route.method.input, body.length === 0 ? {} : JSON.parse(body.toString("utf8")));
      } catch (err) {
        return sendJson(res, 400, { error: err instanceof ProtocolJsonError ? err.message : "request body is not valid JSON" });
      }
    } else {
      request = create(route.method.input);
    }
    const abort = new AbortController();
    res.on("close", () => abort.abort());
    let response: unknown;
    try {
      response = await dispatch(route.call, request, abort.signal, route.method.input);
    } catch (err) {
      const answer = errorAnswer(err, route.call);
      return sendJson(res, answer.status, { error: answer.message });
    }
    let text = encodeProtocolJson(route.method.output, response as never);
    if (route.method.output.typeName === RawResultSchema.typeName && Buffer.byteLength(text) > maxResponseBytes) {
      text = encodeProtocolJson(RawResultSchema, tooLarge(response as RawResult));
    }
    sendText(res, 200, text);
  }

  function errorAnswer(err: unknown, call: string): { status: number; grpc: Code; message: string } {
    if (err instanceof SourceError) return { ...ERROR_CODES[err.code], message: err.message };
    onError(err, call);
    return { status: 500, grpc: Code.Internal, message: "internal error" };
  }

  // -- gRPC -----------------------------------------------------------------------------------
  const authInterceptor: Interceptor = (next) => async (req) => {
    try {
      authenticate(req.header.get("authorization"), undefined);
    } catch (err) {
      if (err instanceof Unauthenticated) throw new ConnectError(err.message, Code.Unauthenticated);
      throw err;
    }
    return next(req);
  };

  function grpcMethod(call: ProtocolCall) {
    const route = PROTOCOL_ROUTES.find((r) => r.call === call)!;
    return async (request: unknown, ctx: HandlerContext) => {
      let response: unknown;
      try {
        response = await dispatch(call, request, ctx.signal, route.method.input);
      } catch (err) {
        const answer = errorAnswer(err, call);
        throw new ConnectError(answer.message, answer.grpc);
      }
      if (route.method.output.typeName === RawResultSchema.typeName && toBinary(RawResultSchema, response as RawResult).byteLength > maxResponseBytes) {
        return tooLarge(response as RawResult);
      }
      return response as never;
    };
  }

  const grpcHandler = connectNodeAdapter({
    grpc: true,
    grpcWeb: false,
    connect: false,
    readMaxBytes: MAX_REQUEST_BYTES,
    // Reads are cut to maxResponseBytes above; the margin leaves room for the partial envelope.
    writeMaxBytes: maxResponseBytes + 64 * 1024,
    // mTLS is checked by the TLS layer before any request; bearer tokens here.
    interceptors: tokenDigests ? [authInterceptor] : [],
    routes(router) {
      router.service(SourceService, {
        capabilities: grpcMethod("capabilities"),
        health: grpcMethod("health"),
        invoke: grpcMethod("invoke"),
        metricsList: grpcMethod("metrics/list"),
        metricsRange: grpcMethod("metrics/range"),
        logsStreams: grpcMethod("logs/streams"),
        logsRange: grpcMethod("logs/range"),
      } as never);
    },
    fallback: (_req, res) => sendJson(res as never, 404, { error: "not found" }),
  });

  // -- one handler for both ----------------------------------------------------------------------
  function handler(req: Request, res: Response): void {
    const path = new URL(req.url ?? "/", "http://source.invalid").pathname;
    const contentType = header(req, "content-type") ?? "";
    if (jsonRoutes.has(path) && !contentType.startsWith("application/grpc")) {
      serveJson(req, res, path).catch((err) => {
        onError(err, path);
        if (!res.headersSent) sendJson(res, 500, { error: "internal error" });
        else res.end();
      });
      return;
    }
    grpcHandler(req as never, res as never);
  }

  async function listen(listenOptions: { port?: number; host?: string } = {}): Promise<RunningSourceServer> {
    const host = listenOptions.host ?? "127.0.0.1";
    const port = listenOptions.port ?? 0;
    const mtls = "mtls" in options.auth ? options.auth.mtls : undefined;
    const tlsMaterial = mtls ?? options.tls;
    if (tlsMaterial) {
      // ALPN picks HTTP/2 (gRPC) or HTTP/1.1 (JSON) on the one TLS port.
      const server = http2.createSecureServer(
        {
          allowHTTP1: true,
          cert: tlsMaterial.cert,
          key: tlsMaterial.key,
          ...(mtls ? { ca: mtls.ca, requestCert: true, rejectUnauthorized: true } : {}),
        },
        handler,
      );
      const sessions = new Set<http2.ServerHttp2Session>();
      server.on("session", (session) => {
        sessions.add(session);
        session.on("close", () => sessions.delete(session));
      });
      const sockets = trackSockets(server, "secureConnection");
      await listenOn(server, port, host);
      const bound = (server.address() as AddressInfo).port;
      return {
        port: bound,
        url: `https://${formatHost(host)}:${bound}`,
        close: () => closeAll(server, sessions, sockets),
      };
    }
    // Cleartext: the first bytes tell HTTP/2 prior knowledge (gRPC) from HTTP/1.1.
    const server = await listenHttp({ host, port, handler });
    return {
      port: server.port,
      url: `http://${formatHost(host)}:${server.port}`,
      close: () => server.close(0),
    };
  }

  return { handler, listen };
}

// ---------------------------------------------------------------------------------------------

interface ValidatedOptions {
  operations: Map<string, SourceOperation>;
  descriptors: OperationDescriptor[];
  maxResponseBytes: number;
}

/** Mistakes a source author can make are caught at start-up, not by the first caller. */
function validateOptions(options: SourceServerOptions): ValidatedOptions {
  const problems: string[] = [];
  if (!options.source) problems.push("source (the source's own tag) is required");
  for (const kind of options.kinds) if (kind !== "metrics" && kind !== "logs") problems.push(`kind ${JSON.stringify(kind)} must be metrics or logs`);
  if (options.kinds.includes("metrics") && !options.metrics) problems.push("kind metrics needs metrics handlers (list and range)");
  if (options.kinds.includes("logs") && !options.logs) problems.push("kind logs needs logs handlers (streams and range)");
  if (options.metrics && !options.kinds.includes("metrics")) problems.push("metrics handlers are given: declare kind metrics");
  if (options.logs && !options.kinds.includes("logs")) problems.push("logs handlers are given: declare kind logs");
  if ("bearerTokens" in options.auth) {
    if (options.auth.bearerTokens.length === 0) problems.push("auth.bearerTokens must hold at least one token: health fails closed");
    if (options.auth.bearerTokens.some((t) => typeof t !== "string" || !/^\S+$/.test(t)))
      problems.push("auth.bearerTokens must be non-empty strings without spaces");
  } else if (!("mtls" in options.auth) || !options.auth.mtls.ca || !options.auth.mtls.cert || !options.auth.mtls.key) {
    problems.push("auth must be {bearerTokens: [...]} or {mtls: {ca, cert, key}}");
  }
  const maxResponseBytes = options.maxResponseBytes ?? MAX_RESPONSE_BYTES;
  if (!(maxResponseBytes > 0 && maxResponseBytes <= MAX_RESPONSE_BYTES)) problems.push(`maxResponseBytes must be between 1 and ${MAX_RESPONSE_BYTES}`);

  const operations = new Map<string, SourceOperation>();
  const descriptors: OperationDescriptor[] = [];
  for (const operation of options.operations ?? []) {
    const d = operation.descriptor;
    const name = JSON.stringify(d.operation);
    if (!d.operation) problems.push("every operation needs a name");
    if (operations.has(d.operation)) problems.push(`operation ${name} is declared twice`);
    if (!(DESCRIPTOR_KINDS as readonly string[]).includes(d.kind)) problems.push(`operation ${name}: kind must be one of ${DESCRIPTOR_KINDS.join(", ")}`);
    if (d.canonical !== undefined && !(CANONICAL_ROLES as readonly string[]).includes(d.canonical))
      problems.push(`operation ${name}: canonical must be one of ${CANONICAL_ROLES.join(", ")}`);
    if (d.canonical === "range" && !d.window) problems.push(`operation ${name} backs a range call: it must declare its window`);
    if (d.window) {
      // The window's start, end and step are the source's own parameter names; the spec does not
      // ask for them among the `params` hints (which describe what a caller supplies).
      if (!d.window.start || !d.window.end) problems.push(`operation ${name}: window.start and window.end name its parameters`);
      if (!(WINDOW_FORMATS as readonly string[]).includes(d.window.format))
        problems.push(`operation ${name}: window.format must be one of ${WINDOW_FORMATS.join(", ")}`);
    }
    operations.set(d.operation, operation);
    descriptors.push(
      create(OperationDescriptorSchema, {
        operation: d.operation,
        description: d.description,
        params: d.params ?? {},
        kind: d.kind,
        ...(d.canonical === undefined ? {} : { canonical: d.canonical }),
        ...(d.window === undefined ? {} : { window: { ...d.window } }),
      }),
    );
  }
  if (problems.length > 0) throw new Error(`invalid source definition:\n  ${problems.join("\n  ")}`);
  return { operations, descriptors, maxResponseBytes };
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

function header(req: Request, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}

async function readBody(req: Request): Promise<Buffer | "too-large"> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    length += chunk.byteLength;
    if (length > MAX_REQUEST_BYTES) return "too-large";
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, length);
}

function sendJson(res: Response, status: number, body: unknown, headers: Record<string, string> = {}): void {
  sendText(res, status, JSON.stringify(body), headers);
}

function sendText(res: Response, status: number, text: string, headers: Record<string, string> = {}): void {
  (res as ServerResponse).writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function trackSockets(server: net.Server, event: "connection" | "secureConnection"): Set<Socket> {
  const sockets = new Set<Socket>();
  server.on(event, (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  return sockets;
}

function listenOn(server: net.Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
}

async function closeAll(server: net.Server, sessions: Set<http2.ServerHttp2Session>, sockets: Set<Socket>): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  for (const session of sessions) session.close();
  for (const socket of sockets) socket.destroy();
  await closed;
}

function formatHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}
