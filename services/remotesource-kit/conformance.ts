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

/**
 * Runs every named check of the conformance check against the source, within the total budget;
 * answers each check's verdict, detail, rule and warnings.
 */
export async function runConformanceCheck(client: SourceClient, options: ConformanceOptions = {}): Promise<ConformanceResult> {
  const now = options.now ?? Date.now;
  const deadline = now() + (options.totalBudgetMs ?? 12_000);
  const expr = options.expr ?? "up";
  const query = options.query ?? "";
  const tenant = { ref: client.connection.tenantRef };
  const recorded: Recorded[] = [];
  const results = new Map<CheckName, CheckResult>();
  const warnings = new Map<CheckName, string[]>();
  const set = (name: CheckName, ok: boolean, detail: string) =>
    results.set(name, { name, ok, detail, ...(ok ? {} : { rule: RULES[name] }), warnings: warnings.get(name) ?? [] });
  const warn = (name: CheckName, text: string) => {
    const list = warnings.get(name) ?? [];
    list.push(text);
    warnings.set(name, list);
    const existing = results.get(name);
    if (existing) existing.warnings = list;
  };

  async function call(name: ProtocolCall, request: Message, label: string, present: Presenting = "connection"): Promise<CallOutcome> {
    const remaining = deadline - now();
    let outcome: CallOutcome;
    if (remaining <= 0) outcome = { ok: false, failure: { kind: "timeout", message: "the conformance check ran out of time before this call" } };
    else outcome = await client.call(name, request, { present, budgetMs: Math.min(READ_BUDGET_MS, remaining) });
    recorded.push({ call: label, present, outcome });
    return outcome;
  }

  // Phase 1: what needs nothing else.
  const [capabilitiesOutcome, healthOutcome, probes] = await Promise.all([
    call("capabilities", create(CapabilitiesRequestSchema), "capabilities"),
    call("health", create(HealthRequestSchema), "health"),
    Promise.all([
      call("health", create(HealthRequestSchema), "health without a credential", "none"),
      call("health", create(HealthRequestSchema), "health with an empty bearer token", { bearerToken: "" }),
      call("health", create(HealthRequestSchema), "health with a wrong bearer token", { bearerToken: `wrong-${randomBytes(16).toString("hex")}` }),
    ]),
  ]);

  // health
  if (healthOutcome.ok) {
    // The spec states the answer's shape, not that a source reporting itself down breaks the
    // protocol: `ok: false` is reported, and warns.
    const health = healthOutcome.message as HealthResponse;
    if (!health.ok) warn(CHECKS.health, `the source reports itself unhealthy: ok: false${health.detail ? ` (${health.detail})` : ""}`);
    set(CHECKS.health, true, health.ok ? "health answered ok: true" : `health answered ok: false${health.detail ? ` (${health.detail})` : ""}`);
  } else {
    set(CHECKS.health, false, `health did not answer: ${describe(healthOutcome.failure)}`);
  }

  // health fails closed
  const usesCertificate = Boolean(client.connection.credentials.clientCertPem);
  const openings: string[] = [];
  const refusals: string[] = [];
  const probeLabels = ["without a credential", "with an empty bearer token", "with a wrong bearer token"];
  probes.forEach((outcome, i) => {
    const label = probeLabels[i]!;
    if (outcome.ok) openings.push(`health answered ${label}`);
    else if (outcome.failure.kind === "credentials-rejected") refusals.push(`${label}: ${outcome.failure.message}`);
    else if (usesCertificate && (outcome.failure.kind === "unreachable" || outcome.failure.kind === "invalid-response"))
      refusals.push(`${label}: refused at the TLS handshake`);
    else openings.push(`health ${label} did not answer 401/403 or UNAUTHENTICATED/PERMISSION_DENIED (${describe(outcome.failure)})`);
  });
  set(CHECKS.healthFailsClosed, openings.length === 0, openings.length === 0 ? `refused ${refusals.join("; ")}` : openings.join("; "));

  // capabilities and protocol version
  let capabilities: CapabilitiesResponse | undefined;
  if (!capabilitiesOutcome.ok) {
    set(CHECKS.capabilities, false, `capabilities did not answer: ${describe(capabilitiesOutcome.failure)}`);
  } else {
    capabilities = capabilitiesOutcome.message as CapabilitiesResponse;
    const problems = capabilitiesProblems(capabilities);
    for (const w of capabilitiesWarnings(capabilities)) warn(CHECKS.capabilities, w);
    set(CHECKS.capabilities, problems.length === 0, problems.length === 0 ? describeCapabilities(capabilities) : problems.join("; "));
    if (problems.length > 0) capabilities = undefined;
  }
  let notRun: string | undefined = capabilities ? undefined : "not run: capabilities did not give a usable answer";
  if (capabilitiesOutcome.ok) {
    const reported = (capabilitiesOutcome.message as CapabilitiesResponse).protocolVersion;
    const major = reported.split(".")[0];
    if (major === PROTOCOL_VERSION) {
      set(CHECKS.protocolVersion, true, `the source speaks protocol version ${reported}`);
    } else {
      set(
        CHECKS.protocolVersion,
        false,
        reported
          ? `the source reports protocol version "${reported}"; this service speaks version ${PROTOCOL_VERSION} only, so the source is refused. Serve version ${PROTOCOL_VERSION}, or upgrade the service to one that speaks ${reported}.`
          : `the source reports no protocol version; this service speaks version ${PROTOCOL_VERSION}`,
      );
      notRun = `not run: protocol version "${reported}" is not ${PROTOCOL_VERSION}`;
    }
  } else {
    set(CHECKS.protocolVersion, false, "not run: capabilities did not answer");
  }

  const shaped: Array<{ call: string; result: RawResult }> = [];
  const keep = (label: string, outcome: CallOutcome) => {
    if (outcome.ok) shaped.push({ call: label, result: outcome.message as RawResult });
  };

  /** A check that passes when it found no problems; the detail lists them, or says what passed. */
  const setFromProblems = (name: CheckName, problems: string[], passed: string | (() => string)) =>
    set(name, problems.length === 0, problems.length > 0 ? problems.join("; ") : typeof passed === "string" ? passed : passed());

  if (!capabilities || notRun) {
    const reason = notRun ?? "not run";
    for (const name of [CHECKS.windows, CHECKS.advertised, CHECKS.unadvertised, CHECKS.metrics, CHECKS.logs, CHECKS.shapes]) set(name, false, reason);
  } else {
    const operations = capabilities.operations;
    const kinds = capabilities.kinds;

    // windowed operations declare a window
    const windowProblems = operations.flatMap(windowProblemsOf);
    for (const w of operations.flatMap(windowWarningsOf)) warn(CHECKS.windows, w);
    const windowed = operations.filter(isWindowed);
    setFromProblems(
      CHECKS.windows,
      windowProblems,
      windowed.length === 0 ? "no windowed operations" : () => `${windowed.map((o) => o.operation).join(", ")} declare applicable windows`,
    );

    // Phase 2: invoke everything advertised, one unadvertised name, and the canonical calls.
    const startMs = now() - PROBE_WINDOW_MS;
    const endMs = now();
    const unadvertisedName = `conformance-check-unadvertised-${randomBytes(6).toString("hex")}`;
    const window = { fromMs: BigInt(Math.floor(startMs)), toMs: BigInt(Math.floor(endMs)) };

    const invokeOne = async (operation: OperationDescriptor) => {
      const params = probeParams(operation, startMs, endMs);
      const outcome = await call("invoke", create(InvokeRequestSchema, { operation: operation.operation, params, tenant }), `invoke ${operation.operation}`);
      keep(`invoke ${operation.operation}`, outcome);
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
    setFromProblems(
      CHECKS.advertised,
      badInvokes,
      operations.length === 0 ? "no operations advertised" : () => `${operations.length} advertised operation(s) answered or refused with a typed error`,
    );

    // unadvertised operation refused
    if (unadvertised.ok) {
      set(CHECKS.unadvertised, false, `invoke accepted ${unadvertisedName}, which capabilities does not list; it must answer 404 (gRPC NOT_FOUND)`);
    } else {
      const f = unadvertised.failure;
      const refused = f.kind === "not-found" && (f.status === 404 || f.grpcCode === "NOT_FOUND");
      set(
        CHECKS.unadvertised,
        refused,
        refused
          ? `an unadvertised operation was refused (${f.message})`
          : `an unadvertised operation must be refused with 404 (gRPC NOT_FOUND), not ${describe(f)}`,
      );
    }

    // canonical calls of each declared kind
    const canonical = (kind: "metrics" | "logs", calls: CallOutcome[] | undefined, names: [string, string], probe: string) => {
      if (!calls) return set(kind === "metrics" ? CHECKS.metrics : CHECKS.logs, true, `kind ${kind} not declared`);
      const problems: string[] = [];
      calls.forEach((outcome, i) => {
        keep(names[i]!, outcome);
        // The range probe uses an expression the source may not know: a typed 400 still answers.
        const problem = answerProblem(outcome, { acceptTypedErrors: false, acceptInvalidArgument: i === 1 });
        if (problem) problems.push(`${names[i]}: ${problem}`);
      });
      const note = calls[1] && !calls[1].ok ? ` (${names[1]} refused the probe ${probe}: ${calls[1].failure.message})` : "";
      set(
        kind === "metrics" ? CHECKS.metrics : CHECKS.logs,
        problems.length === 0,
        problems.length > 0 ? problems.join("; ") : `${names.join(" and ")} answered${note}`,
      );
    };
    canonical("metrics", metricsCalls, ["metrics/list", "metrics/range"], `expression ${JSON.stringify(expr)}`);
    canonical("logs", logsCalls, ["logs/streams", "logs/range"], `query ${JSON.stringify(query)}`);

    // series and entries ordered and typed
    const shapeProblems: string[] = [];
    let seriesCount = 0;
    let entryCount = 0;
    for (const { call: label, result } of shaped) {
      seriesCount += result.series.length;
      entryCount += result.entries.length;
      const s = seriesProblem(result.series);
      if (s) shapeProblems.push(`${label}: ${s}`);
      const e = entriesProblem(result.entries);
      if (e) shapeProblems.push(`${label}: ${e}`);
    }
    set(
      CHECKS.shapes,
      shapeProblems.length === 0,
      shapeProblems.length > 0
        ? shapeProblems.join("; ")
        : seriesCount + entryCount === 0
          ? "no series or entries were returned (the raw payload is used then)"
          : `${seriesCount} series and ${entryCount} entries sorted ascending, ISO 8601 times, finite values`,
    );
  }

  // credentials accepted, from every call made with the connection's credential. A call that never
  // reached the source says nothing about the credential: with none answering, the check fails
  // and says why, rather than passing what it could not see.
  const withCredential = recorded.filter((r) => r.present === "connection");
  const rejected = withCredential.filter((r) => !r.outcome.ok && r.outcome.failure.kind === "credentials-rejected");
  const unreached = recorded.filter((r) => !r.outcome.ok && NOT_REACHED.has(r.outcome.failure.kind));
  const reachedWithCredential = withCredential.filter((r) => r.outcome.ok || !NOT_REACHED.has(r.outcome.failure.kind));
  if (rejected.length > 0) {
    set(
      CHECKS.credentials,
      false,
      `credentials rejected: ${rejected.map((r) => `${r.call} answered ${(r.outcome as { failure: CallFailure }).failure.message}`).join("; ")}`,
    );
  } else if (reachedWithCredential.length === 0) {
    set(CHECKS.credentials, false, `not checked: no call with the connection's credential reached the source (${unreachedReason(unreached)})`);
  } else {
    set(CHECKS.credentials, true, "the connection's credential was accepted");
  }

  // responses within 4 MiB: the spec says what the service does with a larger answer (cuts it to a
  // partial result), not that a source giving one breaks the protocol, so this only warns.
  const tooLarge = recorded.filter(
    (r) => (!r.outcome.ok && r.outcome.failure.kind === "too-large") || (r.outcome.ok && (r.outcome.message as RawResult).error === "response too large"),
  );
  if (tooLarge.length > 0) {
    warn(
      CHECKS.size,
      `response too large: ${tooLarge.map((r) => r.call).join(", ")} answered more than ${MAX_RESPONSE_BYTES} bytes; such reads are cut to a partial result`,
    );
  }
  const reachedAny = recorded.some((r) => r.outcome.ok || !NOT_REACHED.has(r.outcome.failure.kind));
  if (!reachedAny) set(CHECKS.size, false, `not checked: no call reached the source (${unreachedReason(unreached)})`);
  else
    set(
      CHECKS.size,
      true,
      tooLarge.length === 0
        ? `every answer was within ${MAX_RESPONSE_BYTES} bytes`
        : `response too large: ${tooLarge.map((r) => r.call).join(", ")} answered more than ${MAX_RESPONSE_BYTES} bytes (reads are cut to a partial result)`,
    );

  const order = Object.values(CHECKS);
  const checks = order.map((name) => results.get(name) ?? { name, ok: false, detail: "not run", rule: RULES[name], warnings: warnings.get(name) ?? [] });
  const protocolVersion = capabilitiesOutcome.ok ? (capabilitiesOutcome.message as CapabilitiesResponse).protocolVersion : "";
  return { ok: checks.every((c) => c.ok), protocolVersion, checks };
}

/** Failures of a call that never got an answer from the source. */
const NOT_REACHED = new Set<CallFailure["kind"]>(["unreachable", "timeout", "refused-address"]);

/** Why calls did not reach the source, each distinct reason once. */
function unreachedReason(unreached: Recorded[]): string {
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
