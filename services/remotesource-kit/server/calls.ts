import { create, type DescMessage, type JsonObject, type MessageShape } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import {
  CapabilitiesResponseSchema,
  HealthResponseSchema,
  LogsRangeRequestSchema,
  LogsStreamsRequestSchema,
  MetricsListRequestSchema,
  MetricsRangeRequestSchema,
  RawResultSchema,
  type CapabilitiesResponse,
  type HealthResponse,
  type InvokeRequest,
  type LogsRangeRequest,
  type LogsStreamsRequest,
  type MetricsListRequest,
  type MetricsRangeRequest,
  type RawResult,
} from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { PROTOCOL_VERSION, RESPONSE_TOO_LARGE } from "../protocol/limits.js";
import { rawText, toProtocolJson } from "../protocol/protocol-json.js";
import { sortByTime, toIsoTime } from "../protocol/shaped-data.js";
import {
  SourceError,
  type CallContext,
  type LogsRangeCall,
  type LogsStreamsCall,
  type MetricsListCall,
  type MetricsRangeCall,
  type ReadResult,
  type SourceServerOptions,
  type ValidatedOptions,
} from "./definition.js";

/** The protocol's calls on schema messages, named as SourceService's methods: what both transports serve. */
export interface SourceCalls {
  capabilities(): Promise<CapabilitiesResponse>;
  health(signal: AbortSignal): Promise<HealthResponse>;
  invoke(request: InvokeRequest, signal: AbortSignal): Promise<RawResult>;
  metricsList(request: MetricsListRequest, signal: AbortSignal): Promise<RawResult>;
  metricsRange(request: MetricsRangeRequest, signal: AbortSignal): Promise<RawResult>;
  logsStreams(request: LogsStreamsRequest, signal: AbortSignal): Promise<RawResult>;
  logsRange(request: LogsRangeRequest, signal: AbortSignal): Promise<RawResult>;
}

/** The source's calls: requests checked and turned into the handlers' plain values, answers into schema messages. */
export function createSourceCalls(options: SourceServerOptions, config: ValidatedOptions): SourceCalls {
  const { operations, descriptors } = config;

  function context(tenant: string | undefined, signal: AbortSignal): CallContext {
    return { tenant: tenant ?? "", signal };
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

  return {
    capabilities: async () =>
      create(CapabilitiesResponseSchema, {
        protocolVersion: PROTOCOL_VERSION,
        source: options.source,
        kinds: [...options.kinds],
        operations: descriptors,
      }),
    health: async (signal) => {
      const answer = options.health ? await options.health(context("", signal)) : { ok: true };
      return create(HealthResponseSchema, answer.detail === undefined ? { ok: answer.ok } : { ok: answer.ok, detail: answer.detail });
    },
    invoke: async (request, signal) => {
      const operation = operations.get(request.operation);
      if (!operation) throw new SourceError("not-found", `unknown operation ${JSON.stringify(request.operation)}`);
      const params = request.params ?? {};
      const result = await operation.handler(params, context(request.tenant?.ref, signal));
      return rawResult(request.operation, params, result);
    },
    metricsList: async (request, signal) => {
      const handlers = requireKind(options.metrics, "metrics/list");
      const call: MetricsListCall = {};
      if (request.namespace !== undefined) call.namespace = request.namespace;
      if (request.match !== undefined) call.match = request.match;
      const result = await handlers.list(call, context(request.tenant?.ref, signal));
      return rawResult("metrics/list", echo(MetricsListRequestSchema, request), result);
    },
    metricsRange: async (request, signal) => {
      const handlers = requireKind(options.metrics, "metrics/range");
      if (!request.expr) throw new SourceError("invalid-argument", "expr is required");
      const call: MetricsRangeCall = { expr: request.expr, ...window(request) };
      if (request.step !== undefined) call.step = request.step;
      const result = await handlers.range(call, context(request.tenant?.ref, signal));
      return rawResult("metrics/range", echo(MetricsRangeRequestSchema, request), result);
    },
    logsStreams: async (request, signal) => {
      const handlers = requireKind(options.logs, "logs/streams");
      const call: LogsStreamsCall = {};
      if (request.prefix !== undefined) call.prefix = request.prefix;
      if (request.label !== undefined) call.label = request.label;
      const result = await handlers.streams(call, context(request.tenant?.ref, signal));
      return rawResult("logs/streams", echo(LogsStreamsRequestSchema, request), result);
    },
    logsRange: async (request, signal) => {
      const handlers = requireKind(options.logs, "logs/range");
      const call: LogsRangeCall = { query: request.query, ...window(request) };
      if (request.limit !== undefined) {
        if (request.limit < 0) throw new SourceError("invalid-argument", "limit must not be negative");
        call.limit = request.limit;
      }
      const result = await handlers.range(call, context(request.tenant?.ref, signal));
      return rawResult("logs/range", echo(LogsRangeRequestSchema, request), result);
    },
  };
}

/** The request's fields as the result's `params`, without the caller's tenant. */
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

function requireKind<T>(handlers: T | undefined, call: string): T {
  // Kinds are checked at start-up, so a missing handler means the kind is not declared.
  if (!handlers) throw new SourceError("not-found", `this source does not serve ${call}`);
  return handlers;
}

/** The same envelope without the payload: what a read above the size limit becomes. */
export function tooLarge(result: RawResult): RawResult {
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

const ERROR_CODES: Record<SourceError["code"], { status: number; grpc: Code }> = {
  "invalid-argument": { status: 400, grpc: Code.InvalidArgument },
  "not-found": { status: 404, grpc: Code.NotFound },
  "failed-precondition": { status: 412, grpc: Code.FailedPrecondition },
  "resource-exhausted": { status: 429, grpc: Code.ResourceExhausted },
  unavailable: { status: 503, grpc: Code.Unavailable },
  "deadline-exceeded": { status: 504, grpc: Code.DeadlineExceeded },
  internal: { status: 500, grpc: Code.Internal },
};

/** Told of a call's unexpected error (the source's `onError`). */
export type OnCallError = (error: unknown, call: string) => void;

/** How a failed call is answered: a SourceError with its message and status, anything else as an opaque internal error. */
export function callFailure(err: unknown, call: string, onError: OnCallError): { status: number; grpc: Code; message: string } {
  if (err instanceof SourceError) return { ...ERROR_CODES[err.code], message: err.message };
  onError(err, call);
  return { status: 500, grpc: Code.Internal, message: "internal error" };
}
