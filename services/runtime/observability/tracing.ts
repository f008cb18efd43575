import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type TextMapGetter,
} from "@opentelemetry/api";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type postgres from "postgres";

/**
 * OpenTelemetry traces, configured only by the standard OTEL_* variables. With none set, nothing
 * of the SDK is loaded, no interceptor or wrapper is installed, and the helpers below return at
 * their first line: the API alone is a no-op.
 *
 * Spans carry method and route names, outcomes, source badges and org ids; never a token, a
 * secret, a webhook URL, a payload or SQL parameters.
 */

export { SpanKind, SpanStatusCode, type Span };

let enabled = false;
let provider: { forceFlush(): Promise<void>; shutdown(): Promise<void> } | undefined;
const tracer = () => trace.getTracer("warroom");

/** Whether the environment asks for traces: any OTEL_* variable, unless the SDK or the exporter is turned off. */
export function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return false;
  const exporters = env.OTEL_TRACES_EXPORTER?.split(",")
    .map((e) => e.trim().toLowerCase())
    .filter(Boolean);
  if (exporters && exporters.length > 0 && exporters.every((e) => e === "none")) return false;
  return Object.entries(env).some(([key, value]) => key.startsWith("OTEL_") && value);
}

/** Whether spans are recorded (the OTEL_* environment asked for traces). */
export function tracingEnabled(): boolean {
  return enabled;
}

/**
 * Starts the SDK once per OS process when OTEL_* asks for it: spans in batches to the OTLP/HTTP
 * (protobuf) exporter, W3C trace context and baggage propagation, async context through
 * AsyncLocalStorage, the sampler from OTEL_TRACES_SAMPLER. The SDK reads the process environment
 * itself, so that is what decides.
 */
export async function startTracing(serviceName: string): Promise<void> {
  if (enabled || !tracingRequested(process.env)) return;
  const [{ NodeTracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, resources] = await Promise.all([
    import("@opentelemetry/sdk-trace-node"),
    import("@opentelemetry/exporter-trace-otlp-proto"),
    import("@opentelemetry/resources"),
  ]);
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ "service.name": serviceName }))
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the process name.
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const p = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())] });
  p.register();
  provider = p;
  enabled = true;
}

/** Sends what is buffered; called when a process stops. */
export async function flushTracing(): Promise<void> {
  await provider?.forceFlush().catch(() => {});
}

/** The trace and span ids for log lines written inside a span. */
export function logFields(): { trace_id: string; span_id: string } | undefined {
  if (!enabled) return undefined;
  const span = trace.getActiveSpan();
  if (!span) return undefined;
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

type Carrier = Headers | Record<string, string | string[] | undefined>;

const getter: TextMapGetter<Carrier> = {
  keys: (carrier) => (carrier instanceof Headers ? [...carrier.keys()] : Object.keys(carrier)),
  get(carrier, key) {
    if (carrier instanceof Headers) return carrier.get(key) ?? undefined;
    return carrier[key] ?? carrier[key.toLowerCase()];
  },
};

/** The context a caller sent (traceparent, tracestate) on top of the current one. */
export function extractContext(carrier: Carrier): Context {
  return propagation.extract(context.active(), carrier, getter);
}

/** The current trace context as headers (traceparent, tracestate), or nothing outside a trace. */
export function injectHeaders(into: Record<string, string> = {}): Record<string, string> {
  if (!enabled) return into;
  propagation.inject(context.active(), into);
  return into;
}

/** The current span's `traceparent`, to store with an outbox row; null outside a trace or when tracing is off. */
export function currentTraceparent(): string | null {
  if (!enabled) return null;
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ?? null;
}

/** The context a stored `traceparent` names. */
export function contextFromTraceparent(traceparent: string | null | undefined): Context {
  if (!traceparent) return ROOT_CONTEXT;
  return propagation.extract(ROOT_CONTEXT, { traceparent }, getter);
}

/** Runs `fn` with the trace a stored `traceparent` names as the current one; as is without one. */
export function inTraceOf<T>(traceparent: string | null | undefined, fn: () => T): T {
  if (!enabled || !traceparent) return fn();
  return context.with(contextFromTraceparent(traceparent), fn);
}

/** Links the current span to the traces `traceparents` name: one call carrying many callers' work. */
export function linkTraces(traceparents: Iterable<string | null | undefined>): void {
  if (!enabled) return;
  const span = trace.getActiveSpan();
  if (!span) return;
  const links: Link[] = [];
  for (const traceparent of traceparents) {
    const linked = traceparent ? trace.getSpanContext(contextFromTraceparent(traceparent)) : undefined;
    if (linked) links.push({ context: linked });
  }
  if (links.length > 0) span.addLinks(links);
}

/**
 * Runs `fn` inside a new span (a child of `parent`, or of the current span), ending it when `fn`
 * settles and recording a thrown error's type (never its message, which may quote input).
 * Without tracing it only calls `fn`.
 */
export async function inSpan<T>(
  name: string,
  options: { kind?: SpanKind; attributes?: Attributes; parent?: Context; startTime?: Date },
  fn: (span: Span | undefined) => Promise<T>,
): Promise<T> {
  if (!enabled) return fn(undefined);
  const parent = options.parent ?? context.active();
  const span = tracer().startSpan(name, { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes, startTime: options.startTime }, parent);
  try {
    return await context.with(trace.setSpan(parent, span), () => fn(span));
  } catch (err) {
    recordFailure(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** `fn` bound outside any trace: background work a request only wakes up (the outbox relay). */
export function detached<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R {
  return enabled ? context.bind(ROOT_CONTEXT, fn) : fn;
}

/**
 * A span started now and ended by the caller (a publish whose outcome comes back in a batch),
 * under the trace a stored traceparent names; `wait` adds the wait before it as a span of its own. Undefined when tracing is off.
 */
export function openSpan(
  name: string,
  options: { kind: SpanKind; parent: string; wait?: { name: string; since: Date }; attributes?: Attributes },
): { traceparent: string | undefined; end(error?: unknown): void } | undefined {
  if (!enabled) return undefined;
  const parent = contextFromTraceparent(options.parent);
  if (options.wait) tracer().startSpan(options.wait.name, { startTime: options.wait.since, attributes: options.attributes }, parent).end();
  const span = tracer().startSpan(name, { kind: options.kind, attributes: options.attributes }, parent);
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(parent, span), carrier);
  return {
    traceparent: carrier.traceparent,
    end(error) {
      if (error) recordFailure(span, error);
      span.end();
    },
  };
}

/** Marks the span failed, with the Connect code or error name as `error.type`. */
export function recordFailure(span: Span, err: unknown): void {
  const code = err instanceof ConnectError ? Code[err.code] : err instanceof Error ? err.name : "error";
  span.setAttribute("error.type", code ?? "unknown");
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/** Sets attributes on the current span, if any. */
export function annotate(attributes: Attributes): void {
  if (!enabled) return;
  trace.getActiveSpan()?.setAttributes(attributes);
}

const methodName = (req: { service: { typeName: string }; method: { name: string } }) => `${req.service.typeName}/${req.method.name}`;

/** Server side of every Connect call (internal or public): continues the caller's trace. */
export function tracingServerInterceptor(): Interceptor {
  return (next) => (req) => {
    const method = methodName(req);
    return inSpan(
      method,
      { kind: SpanKind.SERVER, parent: extractContext(req.header), attributes: { "rpc.system": "connect_rpc", "rpc.method": method } },
      async (span) => {
        const res = await next(req);
        // The caller learns the trace it joined (or started).
        if (span) res.header.set("traceparent", injectHeaders().traceparent ?? "");
        return res;
      },
    );
  };
}

/** Client side of every internal call: one span, and its context in the request headers. */
export function tracingClientInterceptor(transport: string): Interceptor {
  return (next) => (req) => {
    const method = methodName(req);
    return inSpan(
      method,
      { kind: SpanKind.CLIENT, attributes: { "rpc.system": "connect_rpc", "rpc.method": method, "warroom.transport": transport } },
      async () => {
        for (const [key, value] of Object.entries(injectHeaders())) req.header.set(key, value);
        return next(req);
      },
    );
  };
}

// ---------------------------------------------------------------------------------------------
// SQL: one span per statement, named by its operation, with the statement text (placeholders,
// never the parameters) and its duration.

interface QueryLike {
  executed: boolean;
  string?: string;
  strings?: unknown;
  handle(): Promise<void>;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

function isQuery(value: unknown): value is QueryLike {
  return value instanceof Promise && typeof (value as Partial<QueryLike>).handle === "function" && "executed" in value;
}

function statementText(q: QueryLike): string {
  const text = typeof q.string === "string" && q.string ? q.string : typeof q.strings === "string" ? q.strings : "";
  return text.replace(/\s+/g, " ").trim().slice(0, 2000);
}

/**
 * A span from the moment the statement is sent (when its promise is first awaited) to its
 * answer. Fragments that are only embedded in other statements are never awaited, so never traced.
 */
function traceQuery(q: QueryLike): void {
  const handle = q.handle;
  q.handle = function (this: QueryLike) {
    if (!this.executed) {
      const span = tracer().startSpan("sql", { kind: SpanKind.CLIENT, attributes: { "db.system.name": "postgresql" } });
      const { resolve, reject } = this;
      const finish = () => {
        const text = statementText(this);
        const operation = /^\(?\s*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? "SQL";
        span.updateName(operation);
        span.setAttributes({ "db.operation.name": operation, "db.query.text": text });
      };
      this.resolve = (value) => {
        finish();
        span.end();
        resolve.call(this, value);
      };
      this.reject = (err) => {
        finish();
        const code = (err as { code?: unknown } | undefined)?.code;
        span.setAttribute("error.type", typeof code === "string" ? code : "error");
        span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
        reject.call(this, err);
      };
    }
    return handle.call(this);
  };
}

type AnyFunction = (...args: unknown[]) => unknown;

/** The database handle with a span per statement, in transactions too; used only when tracing is on. */
export function tracedSql(sql: postgres.Sql): postgres.Sql {
  const wrap = <S extends object>(target: S): S =>
    new Proxy(target, {
      apply(fn, thisArg, args) {
        // The apply trap runs only when the target is called, so it is a function.
        const result = Reflect.apply(fn as AnyFunction, thisArg, args);
        if (isQuery(result)) traceQuery(result);
        return result;
      },
      get(obj, prop, receiver) {
        const value = Reflect.get(obj, prop, receiver);
        if (prop === "unsafe" && typeof value === "function") {
          return (...args: unknown[]) => {
            const result = (value as (...a: unknown[]) => unknown).apply(obj, args);
            if (isQuery(result)) traceQuery(result);
            return result;
          };
        }
        if ((prop === "begin" || prop === "savepoint") && typeof value === "function") {
          return (...args: unknown[]) => {
            const fn = args.pop() as (tx: object) => unknown;
            return (value as (...a: unknown[]) => unknown).apply(obj, [...args, (tx: object) => fn(wrap(tx))]);
          };
        }
        return value;
      },
    });
  return wrap(sql);
}
