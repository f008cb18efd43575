import { randomBytes } from "node:crypto";
import { create, type JsonObject, type Message } from "@bufbuild/protobuf";
import {
  CapabilitiesRequestSchema,
  HealthRequestSchema,
  InvokeRequestSchema,
  LogsRangeRequestSchema,
  LogsStreamsRequestSchema,
  MetricsListRequestSchema,
  MetricsRangeRequestSchema,
  type CapabilitiesResponse,
  type HealthResponse,
  type OperationDescriptor,
  type RawResult,
} from "../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { mapBounded } from "../runtime/concurrency/map-bounded.js";
import type { CallFailure, CallOutcome, Presenting, SourceClient } from "./client/source-client.js";
import { CANONICAL_ROLES, DESCRIPTOR_KINDS, MAX_RESPONSE_BYTES, PROTOCOL_VERSION, READ_BUDGET_MS, WINDOW_FORMATS } from "./protocol/limits.js";
import type { ProtocolCall } from "./protocol/protocol-routes.js";
import { entriesProblem, isIsoTime, seriesProblem } from "./protocol/shaped-data.js";
import { formatWindowValue } from "./protocol/window-format.js";

/**
 * The conformance check of a remote source: what Test connection runs before a connection is
 * marked connected, and what a source's author runs against their source (check.ts). Every check
 * is named, passes or fails, and says why.
 */

export const CHECKS = {
  capabilities: "capabilities",
  protocolVersion: "protocol version",
  credentials: "credentials accepted",
  health: "health",
  healthFailsClosed: "health fails closed",
  windows: "windowed operations declare a window",
  advertised: "advertised operations",
  unadvertised: "unadvertised operation refused",
  metrics: "canonical metrics",
  logs: "canonical logs",
  shapes: "series and entries ordered and typed",
  size: "responses within 4 MiB",
} as const;

export type CheckName = (typeof CHECKS)[keyof typeof CHECKS];

/**
 * The rule of the specification each check applies, word for word, so that a failing check says
 * what it holds the source to. A check fails a source only on a rule stated here; what the
 * specification leaves open is reported as a warning and never fails the check.
 */
export const RULES: Record<CheckName, string> = {
  [CHECKS.capabilities]:
    'GET /v1/capabilities answers { protocolVersion: "1", source: string, kinds: array, operations: array of OperationDescriptor }; OperationDescriptor kind is one of metrics, logs, changes, chat; canonical, optional, one of list, range, streams',
  [CHECKS.protocolVersion]: "A source reporting a major version the service does not speak is refused at Test connection with a clear message.",
  [CHECKS.credentials]:
    "The source answers 401 or 403 (HTTP), or UNAUTHENTICATED or PERMISSION_DENIED (gRPC), for a bad credential. The service records a partial result with error `credentials rejected` and the connection shows failed until the credential is updated.",
  [CHECKS.health]: "GET /v1/health answers { ok: boolean, detail?: string }",
  [CHECKS.healthFailsClosed]: "The health check fails closed: an empty or wrong credential is refused.",
  [CHECKS.windows]:
    "every windowed operation declares an applicable window; window: WindowSpec, required for a windowed operation; WindowSpec: start (string), end (string), step (string, optional) are the source's own parameter names. format is one of date, iso, epoch-s, epoch-ms, epoch-ns, grafana.",
  [CHECKS.advertised]: "every advertised operation invokes or fails with a typed error; RawResult fetchedAt: string, RFC 3339",
  [CHECKS.unadvertised]: "An unknown operation answers 404 (HTTP) or NOT_FOUND (gRPC); an operation not advertised fails",
  [CHECKS.metrics]: "A source declaring kind `metrics` implements metrics/list and metrics/range.",
  [CHECKS.logs]: "A source declaring kind `logs` implements logs/streams and logs/range.",
  [CHECKS.shapes]:
    "Rule 7: Series and entries, when returned, are sorted ascending by time, times are ISO 8601, values are finite numbers. If they are left out or empty, the service falls back to the raw payload and this is not an error.",
  [CHECKS.size]: "A response over 4 MiB is truncated into a partial result with error `response too large`.",
};

export interface CheckResult {
  name: CheckName;
  ok: boolean;
  detail: string;
  /** On a failing check, the rule of the specification it applies (a passing check leaves it out). */
  rule?: string;
  /** What the specification leaves open but a reader of the report should know; never fails the check. */
  warnings: string[];
}

export interface ConformanceResult {
  ok: boolean;
  /** As the source reported it; empty when capabilities did not answer. */
  protocolVersion: string;
  checks: CheckResult[];
}

export interface ConformanceOptions {
  /** The whole check's time; each call also keeps to the read budget. Default 12 s. */
  totalBudgetMs?: number;
  /** The expression metrics/range is probed with. Default `up`. */
  expr?: string;
  /** The query logs/range is probed with. Default empty (every line). */
  query?: string;
  now?: () => number;
}

/** Time the probes of windowed calls cover: the last hour. */
const PROBE_WINDOW_MS = 3_600_000;
const INVOKE_CONCURRENCY = 4;

interface Recorded {
  call: string;
  present: Presenting;
  outcome: CallOutcome;
}

/** The verdicts so far: each check's result, and warnings that may come before or after it. */
class Verdicts {
  private readonly results = new Map<CheckName, CheckResult>();
  private readonly warnings = new Map<CheckName, string[]>();

  set(name: CheckName, ok: boolean, detail: string): void {
    this.results.set(name, { name, ok, detail, ...(ok ? {} : { rule: RULES[name] }), warnings: this.warnings.get(name) ?? [] });
  }

  /** A check that passes when it found no problems; the detail lists them, or says what passed. */
  setFromProblems(name: CheckName, problems: string[], passed: string | (() => string)): void {
    this.set(name, problems.length === 0, problems.length > 0 ? problems.join("; ") : typeof passed === "string" ? passed : passed());
  }

  warn(name: CheckName, text: string): void {
    const list = this.warnings.get(name) ?? [];
    list.push(text);
    this.warnings.set(name, list);
    const existing = this.results.get(name);
    if (existing) existing.warnings = list;
  }

  /** Every check in the order CHECKS names them; one never reached is "not run". */
  all(): CheckResult[] {
    return Object.values(CHECKS).map(
      (name) => this.results.get(name) ?? { name, ok: false, detail: "not run", rule: RULES[name], warnings: this.warnings.get(name) ?? [] },
    );
  }
}

/** A call to the source within the check's total budget, recorded for the credential and size checks. */
type Call = (name: ProtocolCall, request: Message, label: string, present?: Presenting) => Promise<CallOutcome>;

/**
 * Runs every named check of the conformance check against the source, within the total budget;
 * answers each check's verdict, detail, rule and warnings.
 */
export async function runConformanceCheck(client: SourceClient, options: ConformanceOptions = {}): Promise<ConformanceResult> {
  const now = options.now ?? Date.now;
  const deadline = now() + (options.totalBudgetMs ?? 12_000);
  const recorded: Recorded[] = [];
  const verdicts = new Verdicts();

  const call: Call = async (name, request, label, present = "connection") => {
    const remaining = deadline - now();
    let outcome: CallOutcome;
    if (remaining <= 0) outcome = { ok: false, failure: { kind: "timeout", message: "the conformance check ran out of time before this call" } };
    else outcome = await client.call(name, request, { present, budgetMs: Math.min(READ_BUDGET_MS, remaining) });
    recorded.push({ call: label, present, outcome });
    return outcome;
  };

  // Phase 1: what needs nothing else.
  const [capabilitiesOutcome, healthOutcome, probes] = await Promise.all([
    call("capabilities", create(CapabilitiesRequestSchema), "capabilities"),
    call("health", create(HealthRequestSchema), "health"),
    Promise.all(
      HEALTH_PROBES.map((probe) =>
        call(
          "health",
          create(HealthRequestSchema),
          `health ${probe.label}`,
          probe.present === "wrong" ? { bearerToken: `wrong-${randomBytes(16).toString("hex")}` } : probe.present,
        ),
      ),
    ),
  ]);
  judgeHealth(verdicts, healthOutcome);
  judgeHealthFailsClosed(verdicts, probes, Boolean(client.connection.credentials.clientCertPem));
  const { capabilities, notRun } = judgeCapabilities(verdicts, capabilitiesOutcome);

  if (!capabilities || notRun) {
    const reason = notRun ?? "not run";
    for (const name of [CHECKS.windows, CHECKS.advertised, CHECKS.unadvertised, CHECKS.metrics, CHECKS.logs, CHECKS.shapes]) verdicts.set(name, false, reason);
  } else {
    // Phase 2: invoke everything advertised, one unadvertised name, and the canonical calls.
    await runOperationChecks(verdicts, call, capabilities, {
      expr: options.expr ?? "up",
      query: options.query ?? "",
      tenant: { ref: client.connection.tenantRef },
      now,
    });
  }
  judgeCredentials(verdicts, recorded);
  judgeSize(verdicts, recorded);

  const checks = verdicts.all();
  const protocolVersion = capabilitiesOutcome.ok ? (capabilitiesOutcome.message as CapabilitiesResponse).protocolVersion : "";
  return { ok: checks.every((c) => c.ok), protocolVersion, checks };
}

/** The probes that health must refuse: no credential, an empty bearer token, a wrong one. */
const HEALTH_PROBES: Array<{ label: string; present: Presenting | "wrong" }> = [
  { label: "without a credential", present: "none" },
  { label: "with an empty bearer token", present: { bearerToken: "" } },
  { label: "with a wrong bearer token", present: "wrong" },
];

function judgeHealth(verdicts: Verdicts, outcome: CallOutcome): void {
  if (!outcome.ok) {
    verdicts.set(CHECKS.health, false, `health did not answer: ${describe(outcome.failure)}`);
    return;
  }
  // The spec states the answer's shape, not that a source reporting itself down breaks the
  // protocol: `ok: false` is reported, and warns.
  const health = outcome.message as HealthResponse;
  const detail = health.detail ? ` (${health.detail})` : "";
  if (!health.ok) verdicts.warn(CHECKS.health, `the source reports itself unhealthy: ok: false${detail}`);
  verdicts.set(CHECKS.health, true, health.ok ? "health answered ok: true" : `health answered ok: false${detail}`);
}

function judgeHealthFailsClosed(verdicts: Verdicts, probes: CallOutcome[], usesCertificate: boolean): void {
  const openings: string[] = [];
  const refusals: string[] = [];
  probes.forEach((outcome, i) => {
    const label = HEALTH_PROBES[i]!.label;
    if (outcome.ok) openings.push(`health answered ${label}`);
    else if (outcome.failure.kind === "credentials-rejected") refusals.push(`${label}: ${outcome.failure.message}`);
    else if (usesCertificate && (outcome.failure.kind === "unreachable" || outcome.failure.kind === "invalid-response"))
      refusals.push(`${label}: refused at the TLS handshake`);
    else openings.push(`health ${label} did not answer 401/403 or UNAUTHENTICATED/PERMISSION_DENIED (${describe(outcome.failure)})`);
  });
  verdicts.set(CHECKS.healthFailsClosed, openings.length === 0, openings.length === 0 ? `refused ${refusals.join("; ")}` : openings.join("; "));
}

/**
 * The capabilities and protocol-version checks; answers the capabilities when they are usable,
 * and why the operation checks do not run otherwise.
 */
function judgeCapabilities(verdicts: Verdicts, outcome: CallOutcome): { capabilities?: CapabilitiesResponse; notRun?: string } {
  if (!outcome.ok) {
    verdicts.set(CHECKS.capabilities, false, `capabilities did not answer: ${describe(outcome.failure)}`);
    verdicts.set(CHECKS.protocolVersion, false, "not run: capabilities did not answer");
    return { notRun: "not run: capabilities did not give a usable answer" };
  }
  const answered = outcome.message as CapabilitiesResponse;
  const problems = capabilitiesProblems(answered);
  for (const w of capabilitiesWarnings(answered)) verdicts.warn(CHECKS.capabilities, w);
  verdicts.setFromProblems(CHECKS.capabilities, problems, () => describeCapabilities(answered));
  let notRun = problems.length === 0 ? undefined : "not run: capabilities did not give a usable answer";

  const reported = answered.protocolVersion;
  if (reported.split(".")[0] === PROTOCOL_VERSION) {
    verdicts.set(CHECKS.protocolVersion, true, `the source speaks protocol version ${reported}`);
  } else {
    verdicts.set(
      CHECKS.protocolVersion,
      false,
      reported
        ? `the source reports protocol version "${reported}"; this service speaks version ${PROTOCOL_VERSION} only, so the source is refused. Serve version ${PROTOCOL_VERSION}, or upgrade the service to one that speaks ${reported}.`
        : `the source reports no protocol version; this service speaks version ${PROTOCOL_VERSION}`,
    );
    notRun = `not run: protocol version "${reported}" is not ${PROTOCOL_VERSION}`;
  }
  return problems.length === 0 ? { capabilities: answered, ...(notRun ? { notRun } : {}) } : { notRun: notRun! };
}

/** Phase 2: the window, advertised, unadvertised, canonical-call and shape checks. */
async function runOperationChecks(
  verdicts: Verdicts,
  call: Call,
  capabilities: CapabilitiesResponse,
  probe: { expr: string; query: string; tenant: { ref: string }; now: () => number },
): Promise<void> {
  const { operations, kinds } = capabilities;
  const { expr, query, tenant } = probe;

  // windowed operations declare a window
  for (const w of operations.flatMap(windowWarningsOf)) verdicts.warn(CHECKS.windows, w);
  const windowed = operations.filter(isWindowed);
  verdicts.setFromProblems(
    CHECKS.windows,
    operations.flatMap(windowProblemsOf),
    windowed.length === 0 ? "no windowed operations" : () => `${windowed.map((o) => o.operation).join(", ")} declare applicable windows`,
  );

  const startMs = probe.now() - PROBE_WINDOW_MS;
  const endMs = probe.now();
  const unadvertisedName = `conformance-check-unadvertised-${randomBytes(6).toString("hex")}`;
  const window = { fromMs: BigInt(Math.floor(startMs)), toMs: BigInt(Math.floor(endMs)) };
  const invokeOne = async (operation: OperationDescriptor) => {
    const params = probeParams(operation, startMs, endMs);
    const outcome = await call("invoke", create(InvokeRequestSchema, { operation: operation.operation, params, tenant }), `invoke ${operation.operation}`);
    return { operation: operation.operation, outcome };
  };
  const [invoked, unadvertised, metricsCalls, logsCalls] = await Promise.all([
    mapBounded(operations, INVOKE_CONCURRENCY, invokeOne),
    call("invoke", create(InvokeRequestSchema, { operation: unadvertisedName, params: {}, tenant }), `invoke ${unadvertisedName}`),
    kinds.includes("metrics")
      ? Promise.all([
          call("metrics/list", create(MetricsListRequestSchema, { tenant }), "metrics/list"),
          call("metrics/range", create(MetricsRangeRequestSchema, { expr, window, tenant }), "metrics/range"),
        ])
      : undefined,
    kinds.includes("logs")
      ? Promise.all([
          call("logs/streams", create(LogsStreamsRequestSchema, { tenant }), "logs/streams"),
          call("logs/range", create(LogsRangeRequestSchema, { query, window, limit: 100, tenant }), "logs/range"),
        ])
      : undefined,
  ]);

  // advertised operations
  const badInvokes = invoked.flatMap(({ operation, outcome }) => {
    const problem = answerProblem(outcome, { acceptTypedErrors: true });
    return problem ? [`${operation}: ${problem}`] : [];
  });
  verdicts.setFromProblems(
    CHECKS.advertised,
    badInvokes,
    operations.length === 0 ? "no operations advertised" : () => `${operations.length} advertised operation(s) answered or refused with a typed error`,
  );
  judgeUnadvertised(verdicts, unadvertisedName, unadvertised);
  judgeCanonical(verdicts, "metrics", metricsCalls, ["metrics/list", "metrics/range"], `expression ${JSON.stringify(expr)}`);
  judgeCanonical(verdicts, "logs", logsCalls, ["logs/streams", "logs/range"], `query ${JSON.stringify(query)}`);

  const shaped = [
    ...invoked.map(({ operation, outcome }) => ({ call: `invoke ${operation}`, outcome })),
    ...(metricsCalls ?? []).map((outcome, i) => ({ call: i === 0 ? "metrics/list" : "metrics/range", outcome })),
    ...(logsCalls ?? []).map((outcome, i) => ({ call: i === 0 ? "logs/streams" : "logs/range", outcome })),
  ].flatMap(({ call: label, outcome }) => (outcome.ok ? [{ call: label, result: outcome.message as RawResult }] : []));
  judgeShapes(verdicts, shaped);
}

function judgeUnadvertised(verdicts: Verdicts, name: string, outcome: CallOutcome): void {
  if (outcome.ok) {
    verdicts.set(CHECKS.unadvertised, false, `invoke accepted ${name}, which capabilities does not list; it must answer 404 (gRPC NOT_FOUND)`);
    return;
  }
  const f = outcome.failure;
  const refused = f.kind === "not-found" && (f.status === 404 || f.grpcCode === "NOT_FOUND");
  verdicts.set(
    CHECKS.unadvertised,
    refused,
    refused
      ? `an unadvertised operation was refused (${f.message})`
      : `an unadvertised operation must be refused with 404 (gRPC NOT_FOUND), not ${describe(f)}`,
  );
}

/** The canonical calls of a declared kind: a list and a range call, both answering. */
function judgeCanonical(verdicts: Verdicts, kind: "metrics" | "logs", calls: CallOutcome[] | undefined, names: [string, string], probe: string): void {
  const check = kind === "metrics" ? CHECKS.metrics : CHECKS.logs;
  if (!calls) {
    verdicts.set(check, true, `kind ${kind} not declared`);
    return;
  }
  const problems: string[] = [];
  calls.forEach((outcome, i) => {
    // The range probe uses an expression the source may not know: a typed 400 still answers.
    const problem = answerProblem(outcome, { acceptTypedErrors: false, acceptInvalidArgument: i === 1 });
    if (problem) problems.push(`${names[i]}: ${problem}`);
  });
  const note = calls[1] && !calls[1].ok ? ` (${names[1]} refused the probe ${probe}: ${calls[1].failure.message})` : "";
  verdicts.setFromProblems(check, problems, `${names.join(" and ")} answered${note}`);
}

/** Series and entries ordered and typed, over every answer that carried a result. */
function judgeShapes(verdicts: Verdicts, shaped: Array<{ call: string; result: RawResult }>): void {
  const problems: string[] = [];
  let seriesCount = 0;
  let entryCount = 0;
  for (const { call: label, result } of shaped) {
    seriesCount += result.series.length;
    entryCount += result.entries.length;
    const s = seriesProblem(result.series);
    if (s) problems.push(`${label}: ${s}`);
    const e = entriesProblem(result.entries);
    if (e) problems.push(`${label}: ${e}`);
  }
  verdicts.setFromProblems(
    CHECKS.shapes,
    problems,
    seriesCount + entryCount === 0
      ? "no series or entries were returned (the raw payload is used then)"
      : `${seriesCount} series and ${entryCount} entries sorted ascending, ISO 8601 times, finite values`,
  );
}

/**
 * Credentials accepted, from every call made with the connection's credential. A call that never
 * reached the source says nothing about the credential: with none answering, the check fails and
 * says why, rather than passing what it could not see.
 */
function judgeCredentials(verdicts: Verdicts, recorded: Recorded[]): void {
  const withCredential = recorded.filter((r) => r.present === "connection");
  const rejected = withCredential.filter((r) => !r.outcome.ok && r.outcome.failure.kind === "credentials-rejected");
  const reachedWithCredential = withCredential.filter((r) => r.outcome.ok || !NOT_REACHED.has(r.outcome.failure.kind));
  if (rejected.length > 0) {
    verdicts.set(
      CHECKS.credentials,
      false,
      `credentials rejected: ${rejected.map((r) => `${r.call} answered ${(r.outcome as { failure: CallFailure }).failure.message}`).join("; ")}`,
    );
  } else if (reachedWithCredential.length === 0) {
    verdicts.set(CHECKS.credentials, false, `not checked: no call with the connection's credential reached the source (${unreachedReason(recorded)})`);
  } else {
    verdicts.set(CHECKS.credentials, true, "the connection's credential was accepted");
  }
}

/**
 * Responses within 4 MiB: the spec says what the service does with a larger answer (cuts it to a
 * partial result), not that a source giving one breaks the protocol, so this only warns.
 */
function judgeSize(verdicts: Verdicts, recorded: Recorded[]): void {
  const tooLarge = recorded.filter(
    (r) => (!r.outcome.ok && r.outcome.failure.kind === "too-large") || (r.outcome.ok && (r.outcome.message as RawResult).error === "response too large"),
  );
  const overLimit = `response too large: ${tooLarge.map((r) => r.call).join(", ")} answered more than ${MAX_RESPONSE_BYTES} bytes`;
  if (tooLarge.length > 0) verdicts.warn(CHECKS.size, `${overLimit}; such reads are cut to a partial result`);
  const reachedAny = recorded.some((r) => r.outcome.ok || !NOT_REACHED.has(r.outcome.failure.kind));
  if (!reachedAny) {
    verdicts.set(CHECKS.size, false, `not checked: no call reached the source (${unreachedReason(recorded)})`);
    return;
  }
  verdicts.set(
    CHECKS.size,
    true,
    tooLarge.length === 0 ? `every answer was within ${MAX_RESPONSE_BYTES} bytes` : `${overLimit} (reads are cut to a partial result)`,
  );
}

/** Failures of a call that never got an answer from the source. */
const NOT_REACHED = new Set<CallFailure["kind"]>(["unreachable", "timeout", "refused-address"]);

/** Why calls did not reach the source, each distinct reason once. */
function unreachedReason(recorded: Recorded[]): string {
  const unreached = recorded.filter((r) => !r.outcome.ok && NOT_REACHED.has(r.outcome.failure.kind));
  const reasons = [...new Set(unreached.map((r) => describe((r.outcome as { failure: CallFailure }).failure)))];
  return reasons.length > 0 ? reasons.join("; ") : "no call was made";
}

function describe(failure: CallFailure): string {
  return `${failure.kind.replace(/-/g, " ")}: ${failure.message}`;
}

function describeCapabilities(c: CapabilitiesResponse): string {
  const kinds = c.kinds.length > 0 ? `kinds ${c.kinds.join(", ")}` : "no kinds (invoke only)";
  return `source ${JSON.stringify(c.source)}, ${kinds}, ${c.operations.length} operation(s)`;
}

function capabilitiesProblems(c: CapabilitiesResponse): string[] {
  const problems: string[] = [];
  for (const [i, o] of c.operations.entries()) {
    const name = o.operation ? JSON.stringify(o.operation) : `operation ${i}`;
    if (!(DESCRIPTOR_KINDS as readonly string[]).includes(o.kind))
      problems.push(`${name}: kind ${JSON.stringify(o.kind)} is not one of ${DESCRIPTOR_KINDS.join(", ")}`);
    if (o.canonical !== undefined && !(CANONICAL_ROLES as readonly string[]).includes(o.canonical))
      problems.push(`${name}: canonical ${JSON.stringify(o.canonical)} is not one of ${CANONICAL_ROLES.join(", ")}`);
  }
  return problems;
}

/** Where the spec is silent: worth saying, never a failure. */
function capabilitiesWarnings(c: CapabilitiesResponse): string[] {
  const warnings: string[] = [];
  if (!c.source) warnings.push("source (the source's own tag) is empty");
  const seen = new Set<string>();
  for (const [i, o] of c.operations.entries()) {
    const name = o.operation ? JSON.stringify(o.operation) : `operation ${i}`;
    if (!o.operation) warnings.push(`${name} has no name, so invoke cannot name it`);
    else if (seen.has(o.operation)) warnings.push(`${name} is listed twice`);
    seen.add(o.operation);
  }
  return warnings;
}

function isWindowed(o: OperationDescriptor): boolean {
  return o.canonical === "range" || o.window !== undefined;
}

function windowProblemsOf(o: OperationDescriptor): string[] {
  if (!isWindowed(o)) return [];
  const name = JSON.stringify(o.operation);
  const w = o.window;
  if (!w) return [`${name} backs a range call but declares no window`];
  const problems: string[] = [];
  if (!w.start || !w.end) problems.push(`${name}: window.start and window.end must name its parameters`);
  if (!(WINDOW_FORMATS as readonly string[]).includes(w.format))
    problems.push(`${name}: window.format ${JSON.stringify(w.format)} is not one of ${WINDOW_FORMATS.join(", ")}`);
  if (w.minStepSeconds !== undefined && !Number.isFinite(w.minStepSeconds)) problems.push(`${name}: window.minStepSeconds must be a number`);
  return problems;
}

/**
 * What the spec leaves open about a window. The `params` hints describe what a caller supplies;
 * the window's parameters are filled in by the service, so they need not be listed there.
 */
function windowWarningsOf(o: OperationDescriptor): string[] {
  if (!isWindowed(o) || !o.window) return [];
  const name = JSON.stringify(o.operation);
  const w = o.window;
  const warnings: string[] = [];
  if (w.start && w.start === w.end) warnings.push(`${name}: window.start and window.end name the same parameter`);
  if (w.minStepSeconds !== undefined && Number.isFinite(w.minStepSeconds) && w.minStepSeconds <= 0)
    warnings.push(`${name}: window.minStepSeconds ${w.minStepSeconds} is not positive; probes step by 60 s`);
  return warnings;
}

/** Parameters a probe invokes an operation with: its window over the last hour, if it has one. */
function probeParams(o: OperationDescriptor, startMs: number, endMs: number): JsonObject {
  const w = o.window;
  if (!w?.start || !w.end || !(WINDOW_FORMATS as readonly string[]).includes(w.format)) return {};
  const params: JsonObject = { [w.start]: formatWindowValue(startMs, w.format), [w.end]: formatWindowValue(endMs, w.format) };
  if (w.step) params[w.step] = w.stepFormat === "duration" ? `${Math.max(60, w.minStepSeconds ?? 0)}s` : Math.max(60, w.minStepSeconds ?? 0);
  return params;
}

/** Why an answer does not count, or undefined when it does. */
function answerProblem(outcome: CallOutcome, accept: { acceptTypedErrors: boolean; acceptInvalidArgument?: boolean }): string | undefined {
  if (outcome.ok) {
    const r = outcome.message as RawResult;
    if (!isIsoTime(r.fetchedAt)) return `fetchedAt ${JSON.stringify(r.fetchedAt)} is not an RFC 3339 time`;
    return undefined;
  }
  const f = outcome.failure;
  // Counted by "responses within 4 MiB" and "credentials accepted"; here it did answer.
  if (f.kind === "too-large") return undefined;
  if (f.kind === "not-found") return `answered ${f.message}: an advertised or canonical operation must not be unknown`;
  if (f.kind === "credentials-rejected") return `credentials rejected (${f.message})`;
  if (f.kind === "source-error" && f.typed) {
    if (accept.acceptTypedErrors) return undefined;
    if (accept.acceptInvalidArgument && (f.status === 400 || f.grpcCode === "INVALID_ARGUMENT")) return undefined;
    return `failed: ${f.message}`;
  }
  return describe(f);
}
