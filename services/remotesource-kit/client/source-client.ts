import tls from "node:tls";
import { create, fromBinary, isMessage, toBinary, type JsonObject, type Message } from "@bufbuild/protobuf";
import {
  InvokeRequestSchema,
  LogsRangeRequestSchema,
  MetricsRangeRequestSchema,
  RawResultSchema,
  type RawResult,
} from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { createEgressClient, EgressError, type AddressPolicy, type HostResolver } from "../../runtime/egress/index.js";
import { CREDENTIALS_REJECTED, MAX_RESPONSE_BYTES, READ_BUDGET_MS, RESPONSE_TOO_LARGE } from "../protocol/limits.js";
import { decodeProtocolJson, encodeProtocolJson, fromProtocolJson, ProtocolJsonError, toProtocolJson } from "../protocol/protocol-json.js";
import { grpcPath, routeOf, type ProtocolCall, type ProtocolRoute, type ReadCall } from "../protocol/protocol-routes.js";
import { entriesProblem, seriesProblem } from "../protocol/shaped-data.js";
import { GrpcTransportError, grpcUnary } from "./grpc-unary.js";
import { injectHeaders, inSpan, SpanKind, SpanStatusCode, tracingEnabled } from "../../runtime/observability/tracing.js";

/**
 * The service's side of the remote source protocol: calls a source over HTTP-JSON or gRPC as its
 * connection says, through the egress address policy, with the connection's credential and its
 * tenant on every call. A read never throws for what the source does: every failure becomes a
 * partial RawResult whose `error` says why.
 */

export type SourceTransport = "http" | "grpc";

export interface SourceCredentials {
  bearerToken?: string | undefined;
  /** Mutual TLS: client certificate and key (PEM). */
  clientCertPem?: string | undefined;
  clientKeyPem?: string | undefined;
  /** A CA to trust for the source's server certificate, besides the system roots. */
  caPem?: string | undefined;
}

export interface SourceConnection {
  baseUrl: string;
  transport: SourceTransport;
  tenantRef: string;
  credentials: SourceCredentials;
}

export interface SourceClientOptions {
  policy: AddressPolicy;
  resolver?: HostResolver;
  /** An extra trusted CA for every source (configuration), besides the connection's own. */
  ca?: string | Buffer;
  /** The read budget of one call; READ_BUDGET_MS when left out. */
  budgetMs?: number;
  maxResponseBytes?: number;
  /**
   * Keep HTTP connections to the source open between calls for this long when idle (0 or absent:
   * a new connection per call). A client that lives for many calls (the investigations') sets it.
   */
  keepAliveMs?: number;
}

/** Which credential a call presents: the connection's, none at all, or a stand-in bearer token. */
export type Presenting = "connection" | "none" | { bearerToken: string };

export type CallFailureKind =
  | "credentials-rejected"
  | "not-found"
  | "too-large"
  | "timeout"
  | "unreachable"
  | "refused-address"
  | "source-error"
  | "invalid-response";

export interface CallFailure {
  kind: CallFailureKind;
  /** For people; never carries the credential or the URL's path. */
  message: string;
  /** HTTP status of the answer, when there was one. */
  status?: number;
  /** gRPC status name of the answer (e.g. NOT_FOUND), when there was one. */
  grpcCode?: string;
  /** The source refused in the protocol's terms: a JSON `{error}` body, or a gRPC status other than UNKNOWN. */
  typed?: boolean;
}

export type CallOutcome = { ok: true; message: unknown } | { ok: false; failure: CallFailure };

export interface ReadOutcome {
  result: RawResult;
  /** Why the read is partial when the call itself failed (the result says it too). */
  failure?: CallFailure;
}

export class ReadRequestError extends Error {
  override name = "ReadRequestError";
}

export interface SourceClient {
  readonly connection: SourceConnection;
  /** One protocol call with a schema message (tenant already set; none for capabilities and health); what happened, never a throw. */
  call(call: ProtocolCall, request: Message | undefined, options?: { present?: Presenting; budgetMs?: number }): Promise<CallOutcome>;
  /**
   * A read: the protocol request without `tenant` as JSON (the client adds it). Throws
   * ReadRequestError for a request that cannot be sent; otherwise answers a RawResult.
   */
  read(call: ReadCall, request: JsonObject, options?: { budgetMs?: number }): Promise<ReadOutcome>;
  /** Closes the connections kept open for later calls (with `keepAliveMs`). */
  close(): void;
}

const GRPC_CODE_NAMES = [
  "OK",
  "CANCELLED",
  "UNKNOWN",
  "INVALID_ARGUMENT",
  "DEADLINE_EXCEEDED",
  "NOT_FOUND",
  "ALREADY_EXISTS",
  "PERMISSION_DENIED",
  "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION",
  "ABORTED",
  "OUT_OF_RANGE",
  "UNIMPLEMENTED",
  "INTERNAL",
  "UNAVAILABLE",
  "DATA_LOSS",
  "UNAUTHENTICATED",
];

/**
 * The service's client of one remote source: protocol calls over HTTP-JSON or gRPC, through the
 * egress policy, within the read budget and size limit.
 */
export function createSourceClient(connection: SourceConnection, options: SourceClientOptions): SourceClient {
  const budget = options.budgetMs ?? READ_BUDGET_MS;
  const maxBytes = options.maxResponseBytes ?? MAX_RESPONSE_BYTES;
  const base = connection.baseUrl.replace(/\/+$/, "");

  // One egress client for every call: its trust is parsed once and, with keep-alive, its
  // connections serve later calls. Each call passes its own budget.
  const egress = createEgressClient({
    policy: options.policy,
    ...(options.resolver ? { resolver: options.resolver } : {}),
    timeoutMs: budget,
    maxResponseBytes: maxBytes,
    ...(options.ca ? { ca: options.ca } : {}),
    ...(options.keepAliveMs ? { keepAliveMs: options.keepAliveMs } : {}),
  });

  function credentialsFor(present: Presenting): { authorization?: string; cert?: string; key?: string } {
    if (present === "none") return {};
    if (typeof present === "object") return { authorization: `Bearer ${present.bearerToken}` };
    const c = connection.credentials;
    return {
      ...(c.bearerToken ? { authorization: `Bearer ${c.bearerToken}` } : {}),
      ...(c.clientCertPem && c.clientKeyPem ? { cert: c.clientCertPem, key: c.clientKeyPem } : {}),
    };
  }

  async function callHttp(route: ProtocolRoute, request: Message, present: Presenting, timeoutMs: number): Promise<CallOutcome> {
    const creds = credentialsFor(present);
    const headers: Record<string, string> = injectHeaders({ accept: "application/json" });
    if (creds.authorization) headers.authorization = creds.authorization;
    let body: string | undefined;
    if (route.httpMethod === "POST") {
      headers["content-type"] = "application/json";
      body = encodeProtocolJson(route.method.input, request);
    }
    let response: Awaited<ReturnType<ReturnType<typeof createEgressClient>["request"]>>;
    try {
      response = await egress.request({
        url: base + route.path,
        timeoutMs,
        method: route.httpMethod,
        headers,
        ...(body === undefined ? {} : { body }),
        ...(creds.cert ? { clientCert: creds.cert, clientKey: creds.key } : {}),
        ...(connection.credentials.caPem ? { ca: connection.credentials.caPem } : {}),
      });
    } catch (err) {
      return { ok: false, failure: egressFailure(err, timeoutMs) };
    }
    const status = response.status;
    if (response.truncated) return { ok: false, failure: { kind: "too-large", message: `the answer is larger than ${maxBytes} bytes`, status } };
    const text = response.body.toString("utf8");
    const typed = errorText(text) !== "";
    if (status === 401 || status === 403)
      return { ok: false, failure: { kind: "credentials-rejected", message: `HTTP ${status}${errorText(text)}`, status, typed } };
    if (status === 404) return { ok: false, failure: { kind: "not-found", message: `HTTP 404${errorText(text)}`, status, typed } };
    if (status !== 200) return { ok: false, failure: { kind: "source-error", message: `HTTP ${status}${errorText(text)}`, status, typed } };
    try {
      return { ok: true, message: decodeProtocolJson(route.method.output, text) };
    } catch (err) {
      return { ok: false, failure: { kind: "invalid-response", message: err instanceof ProtocolJsonError ? err.message : "unreadable answer", status } };
    }
  }

  async function callGrpc(route: ProtocolRoute, request: Message, present: Presenting, timeoutMs: number): Promise<CallOutcome> {
    const started = Date.now();
    const creds = credentialsFor(present);
    let target: Awaited<ReturnType<ReturnType<typeof createEgressClient>["vet"]>>;
    try {
      // Resolution counts against the budget like the rest of the call.
      target = await Promise.race([
        egress.vet(base),
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new EgressError("timeout", `resolving took longer than ${timeoutMs} ms`)), timeoutMs).unref(),
        ),
      ]);
    } catch (err) {
      return { ok: false, failure: egressFailure(err, timeoutMs) };
    }
    const extraCas = [options.ca, connection.credentials.caPem].filter((ca): ca is string | Buffer => ca !== undefined).map(String);
    const metadata: Record<string, string> = injectHeaders();
    if (creds.authorization) metadata.authorization = creds.authorization;
    let answer: Awaited<ReturnType<typeof grpcUnary>>;
    try {
      answer = await grpcUnary({
        target,
        path: new URL(base).pathname.replace(/\/+$/, "") + grpcPath(route.method),
        metadata,
        body: toBinary(route.method.input, request),
        tls: {
          ...(extraCas.length > 0 ? { ca: [...tls.rootCertificates, ...extraCas] } : {}),
          ...(creds.cert ? { cert: creds.cert, key: creds.key } : {}),
        },
        timeoutMs: Math.max(1, timeoutMs - (Date.now() - started)),
        maxMessageBytes: maxBytes,
      });
    } catch (err) {
      if (err instanceof GrpcTransportError) {
        const kind = err.reason === "timeout" ? "timeout" : err.reason === "protocol" ? "invalid-response" : "unreachable";
        return { ok: false, failure: { kind, message: err.message } };
      }
      throw err;
    }
    switch (answer.kind) {
      case "too-large":
        return { ok: false, failure: { kind: "too-large", message: `the answer is ${answer.declaredBytes} bytes, larger than ${maxBytes}` } };
      case "http":
        if (answer.status === 401 || answer.status === 403)
          return { ok: false, failure: { kind: "credentials-rejected", message: `HTTP ${answer.status}`, status: answer.status } };
        if (answer.status === 404) return { ok: false, failure: { kind: "not-found", message: "HTTP 404", status: 404 } };
        return { ok: false, failure: { kind: "source-error", message: `HTTP ${answer.status}`, status: answer.status } };
      case "status": {
        const grpcCode = GRPC_CODE_NAMES[answer.code] ?? `CODE_${answer.code}`;
        const message = `${grpcCode}${answer.message ? `: ${answer.message}` : ""}`;
        const typed = grpcCode !== "UNKNOWN";
        if (grpcCode === "UNAUTHENTICATED" || grpcCode === "PERMISSION_DENIED")
          return { ok: false, failure: { kind: "credentials-rejected", message, grpcCode, typed } };
        if (grpcCode === "NOT_FOUND" || grpcCode === "UNIMPLEMENTED") return { ok: false, failure: { kind: "not-found", message, grpcCode, typed } };
        if (grpcCode === "DEADLINE_EXCEEDED") return { ok: false, failure: { kind: "timeout", message, grpcCode, typed } };
        return { ok: false, failure: { kind: "source-error", message, grpcCode, typed } };
      }
      case "message":
        try {
          return { ok: true, message: fromBinary(route.method.output, answer.bytes) };
        } catch {
          return { ok: false, failure: { kind: "invalid-response", message: `the answer is not a ${route.method.output.name}` } };
        }
    }
  }

  async function call(name: ProtocolCall, request: Message | undefined, callOptions: { present?: Presenting; budgetMs?: number } = {}): Promise<CallOutcome> {
    const route = routeOf(name);
    const timeoutMs = Math.max(1, callOptions.budgetMs ?? budget);
    const present = callOptions.present ?? "connection";
    const message = request ?? create(route.method.input);
    if (!tracingEnabled()) return connection.transport === "grpc" ? callGrpc(route, message, present, timeoutMs) : callHttp(route, message, present, timeoutMs);
    // One span per call, its context sent as traceparent; the source's address and credentials stay out of it.
    return inSpan(
      `remote-source ${route.method.name}`,
      { kind: SpanKind.CLIENT, attributes: { "rpc.method": route.method.name, "warroom.transport": connection.transport === "grpc" ? "grpc" : "http" } },
      async (span) => {
        const outcome =
          connection.transport === "grpc" ? await callGrpc(route, message, present, timeoutMs) : await callHttp(route, message, present, timeoutMs);
        span?.setAttribute("warroom.result", outcome.ok ? "ok" : outcome.failure.kind);
        if (!outcome.ok) span?.setStatus({ code: SpanStatusCode.ERROR });
        return outcome;
      },
    );
  }

  async function read(name: ReadCall, request: JsonObject, readOptions: { budgetMs?: number } = {}): Promise<ReadOutcome> {
    const route = routeOf(name);
    let message: Message;
    try {
      message = fromProtocolJson(route.method.input, { ...request, tenant: { ref: connection.tenantRef } });
    } catch (err) {
      throw new ReadRequestError(err instanceof Error ? err.message : String(err));
    }
    checkReadRequest(message);
    const invoked = isMessage(message, InvokeRequestSchema) ? message : undefined;
    const params = invoked ? (invoked.params ?? {}) : withoutTenant(toProtocolJson(route.method.input, message));
    const operation = invoked ? invoked.operation : name;
    const outcome = await call(name, message, readOptions.budgetMs === undefined ? {} : { budgetMs: readOptions.budgetMs });
    if (!outcome.ok) {
      return { result: partialResult(operation, params, failureText(outcome.failure, readOptions.budgetMs ?? budget)), failure: outcome.failure };
    }
    return { result: checkShapes(outcome.message as RawResult) };
  }

  return { connection, call, read, close: () => egress.close() };
}

function checkReadRequest(message: Message): void {
  if (isMessage(message, InvokeRequestSchema) && !message.operation) throw new ReadRequestError("request.operation is required");
  if (isMessage(message, MetricsRangeRequestSchema) && !message.expr) throw new ReadRequestError("request.expr is required");
  if ((isMessage(message, MetricsRangeRequestSchema) || isMessage(message, LogsRangeRequestSchema)) && !message.window)
    throw new ReadRequestError("request.window {fromMs, toMs} is required");
}

function withoutTenant(json: JsonObject): JsonObject {
  delete json.tenant;
  return json;
}

/** The RawResult of a read the source did not answer usably. */
export function partialResult(operation: string, params: JsonObject, error: string): RawResult {
  return create(RawResultSchema, {
    source: "",
    operation,
    params,
    fetchedAt: new Date().toISOString(),
    raw: "",
    partial: true,
    error,
  });
}

/** The partial result's `error` for a failed call: the spec's words where it has them. */
export function failureText(failure: CallFailure, budgetMs: number): string {
  switch (failure.kind) {
    case "credentials-rejected":
      return CREDENTIALS_REJECTED;
    case "too-large":
      return RESPONSE_TOO_LARGE;
    case "not-found":
      return `not found (${failure.message})`;
    case "timeout":
      return `no answer within the read budget of ${budgetMs} ms`;
    case "unreachable":
      return `unreachable: ${failure.message}`;
    case "refused-address":
      return failure.message;
    case "source-error":
      return `source error: ${failure.message}`;
    case "invalid-response":
      return `invalid response: ${failure.message}`;
  }
}

/**
 * Shaped series and entries that break rule 7 are dropped (the raw payload stays) and the result
 * is marked partial, saying what was wrong. Absent or empty ones are no error: the raw payload is
 * the answer then.
 */
export function checkShapes(result: RawResult): RawResult {
  const problems: string[] = [];
  const seriesIssue = seriesProblem(result.series);
  if (seriesIssue) {
    problems.push(`invalid series: ${seriesIssue}`);
    result.series = [];
  }
  const entriesIssue = entriesProblem(result.entries);
  if (entriesIssue) {
    problems.push(`invalid entries: ${entriesIssue}`);
    result.entries = [];
  }
  if (result.partial && result.error === undefined) result.error = "partial result";
  if (!result.partial && result.error !== undefined) result.partial = true;
  if (problems.length > 0) {
    result.partial = true;
    result.error = [result.error, ...problems].filter(Boolean).join("; ");
  }
  return result;
}

function egressFailure(err: unknown, timeoutMs: number): CallFailure {
  if (err instanceof EgressError) {
    switch (err.reason) {
      case "timeout":
        return { kind: "timeout", message: `no answer within ${timeoutMs} ms` };
      case "invalid_url":
      case "forbidden_scheme":
      case "forbidden_userinfo":
      case "forbidden_address":
        return { kind: "refused-address", message: err.message };
      default:
        return { kind: "unreachable", message: err.message };
    }
  }
  throw err;
}

/** `: <message>` from an error body `{"error": "..."}`, cut short; nothing for other bodies. */
function errorText(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: unknown };
    if (typeof parsed.error === "string" && parsed.error) return `: ${parsed.error.slice(0, 300)}`;
  } catch {
    // Not JSON: the status says enough.
  }
  return "";
}
