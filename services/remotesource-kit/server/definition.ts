import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { OperationDescriptorSchema, type OperationDescriptor } from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { CANONICAL_ROLES, DESCRIPTOR_KINDS, MAX_RESPONSE_BYTES, WINDOW_FORMATS } from "../protocol/limits.js";
import type { TimeInput } from "../protocol/shaped-data.js";

// What a source gives the kit, and the checks it passes before the kit serves it.

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

export interface ValidatedOptions {
  operations: Map<string, SourceOperation>;
  descriptors: OperationDescriptor[];
  maxResponseBytes: number;
}

/** Mistakes a source author can make are caught at start-up, not by the first caller. */
export function validateOptions(options: SourceServerOptions): ValidatedOptions {
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
