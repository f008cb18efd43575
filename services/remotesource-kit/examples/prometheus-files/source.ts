import { readdir, readFile, stat } from "node:fs/promises";
import { basename, join } from "node:path";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import {
  createSourceServer,
  parseWindowValue,
  SourceError,
  type CallContext,
  type EntryInput,
  type ReadResult,
  type SeriesInput,
  type SourceAuth,
  type SourceServer,
} from "../../index.js";

/**
 * An example source: metrics from a Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir,
 * VictoriaMetrics, ...) and logs from the `*.log` files of one directory. It declares both kinds,
 * so it serves the four canonical calls, and advertises five operations for `invoke`.
 */

export interface PrometheusFilesOptions {
  /** Base URL of the Prometheus HTTP API, e.g. http://prometheus:9090 */
  prometheusUrl: string;
  /** Directory whose `*.log` files are the log streams (one stream per file). */
  logDir: string;
  auth: SourceAuth;
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** When set, the caller's tenant reference is sent to Prometheus in this header (e.g. X-Scope-OrgID). */
  tenantHeader?: string;
  /** Budget of one upstream request. */
  upstreamTimeoutMs?: number;
}

const SOURCE_TAG = "prometheus-files";
const DEFAULT_LINES = 1000;
const MAX_LINES = 5000;
/** Prometheus refuses more than 11,000 points per series; 250 is plenty for a chart. */
const TARGET_POINTS = 250;

/**
 * The example source: metrics read from a Prometheus-compatible API and logs from files, served
 * through the hosting kit.
 */
export function createPrometheusFilesSource(options: PrometheusFilesOptions): SourceServer {
  const prometheus = createPrometheusApi(options);
  const files = createLogFiles(options.logDir);

  return createSourceServer({
    source: SOURCE_TAG,
    kinds: ["metrics", "logs"],
    auth: options.auth,
    ...(options.tls ? { tls: options.tls } : {}),
    async health(context) {
      const problems: string[] = [];
      try {
        await prometheus.get("/api/v1/query", { query: "vector(1)" }, context);
      } catch (err) {
        problems.push(`prometheus: ${err instanceof Error ? err.message : String(err)}`);
      }
      try {
        await readdir(options.logDir);
      } catch {
        problems.push("log directory: not readable");
      }
      return problems.length === 0 ? { ok: true } : { ok: false, detail: problems.join("; ") };
    },

    operations: [
      {
        descriptor: {
          operation: "prometheus.label_values",
          description: "Values of one label (metric names by default), optionally for the series a selector matches.",
          params: { label: "label name; __name__ (metric names) when left out", match: 'series selector, e.g. {job="api"}' },
          kind: "metrics",
          canonical: "list",
        },
        handler: (params, context) => prometheus.labelValues(optionalString(params, "label") ?? "__name__", optionalString(params, "match"), context),
      },
      {
        descriptor: {
          operation: "prometheus.query_range",
          description: "A PromQL expression over a time range.",
          params: { query: "PromQL expression", start: "range start, epoch seconds", end: "range end, epoch seconds", step: "resolution in seconds" },
          kind: "metrics",
          canonical: "range",
          window: { start: "start", end: "end", step: "step", format: "epoch-s", stepFormat: "seconds", minStepSeconds: 1 },
        },
        handler: (params, context) => {
          const query = requiredString(params, "query");
          const fromMs = windowParam(params, "start", "epoch-s");
          const toMs = windowParam(params, "end", "epoch-s");
          const step = params.step;
          if (step !== undefined && step !== null && typeof step !== "string" && typeof step !== "number")
            throw new SourceError("invalid-argument", "step must be seconds or a duration");
          return prometheus.queryRange(query, fromMs, toMs, step ?? undefined, context);
        },
      },
      {
        descriptor: {
          operation: "prometheus.query",
          description: "A PromQL expression at one instant (now when time is left out).",
          params: { query: "PromQL expression", time: "evaluation time, epoch seconds" },
          kind: "metrics",
        },
        handler: (params, context) =>
          prometheus.query(requiredString(params, "query"), params.time === undefined ? undefined : windowParam(params, "time", "epoch-s"), context),
      },
      {
        descriptor: {
          operation: "files.list",
          description: "The log files (streams) of the log directory.",
          params: { prefix: "only files whose name starts with this" },
          kind: "logs",
          canonical: "streams",
        },
        handler: (params) => files.streams(optionalString(params, "prefix")),
      },
      {
        descriptor: {
          operation: "files.read",
          description: "Log lines of a time range, oldest first, optionally of one file and containing a text.",
          params: {
            from: "range start, ISO 8601",
            to: "range end, ISO 8601",
            file: "one file name",
            contains: "text a line must contain",
            limit: `most lines (default ${DEFAULT_LINES}, at most ${MAX_LINES})`,
          },
          kind: "logs",
          canonical: "range",
          window: { start: "from", end: "to", format: "iso" },
        },
        handler: (params) =>
          files.range({
            fromMs: windowParam(params, "from", "iso"),
            toMs: windowParam(params, "to", "iso"),
            file: optionalString(params, "file"),
            contains: optionalString(params, "contains") ?? "",
            limit: optionalNumber(params, "limit"),
          }),
      },
    ],

    metrics: {
      async list(call, context) {
        const result = await prometheus.labelValues("__name__", call.match, context);
        if (!call.namespace) return result;
        // A metric's namespace is the first part of its name: http_requests_total is in "http".
        const data = (result.raw as { data?: unknown }).data;
        const names = Array.isArray(data) ? data.filter((n): n is string => typeof n === "string" && n.startsWith(`${call.namespace}_`)) : [];
        return { raw: { ...(result.raw as JsonObject), data: names } };
      },
      range: (call, context) => prometheus.queryRange(call.expr, call.fromMs, call.toMs, call.step, context),
    },
    logs: {
      streams: (call) => files.streams(call.prefix),
      range: (call) => files.range({ fromMs: call.fromMs, toMs: call.toMs, file: undefined, contains: call.query, limit: call.limit }),
    },
  });
}

// ---------------------------------------------------------------------------------------------
// Metrics: the Prometheus HTTP API.

interface PrometheusMatrixItem {
  metric: Record<string, string>;
  values: Array<[number, string]>;
}

function createPrometheusApi(options: PrometheusFilesOptions) {
  const base = options.prometheusUrl.replace(/\/+$/, "");
  const timeoutMs = options.upstreamTimeoutMs ?? 4000;

  async function get(path: string, params: Record<string, string | string[] | undefined>, context: CallContext): Promise<JsonObject> {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) {
      if (value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) search.append(name, v);
    }
    const headers: Record<string, string> = { accept: "application/json" };
    if (options.tenantHeader && context.tenant) headers[options.tenantHeader] = context.tenant;
    let response: Response;
    try {
      response = await fetch(`${base}${path}?${search}`, { headers, signal: AbortSignal.any([context.signal, AbortSignal.timeout(timeoutMs)]) });
    } catch (err) {
      const timedOut = err instanceof Error && err.name === "TimeoutError";
      throw new SourceError(
        timedOut ? "deadline-exceeded" : "unavailable",
        timedOut ? `prometheus did not answer within ${timeoutMs} ms` : "prometheus is unreachable",
      );
    }
    let body: JsonObject;
    try {
      body = (await response.json()) as JsonObject;
    } catch {
      throw new SourceError("unavailable", `prometheus answered HTTP ${response.status} without JSON`);
    }
    if (response.status === 400 || response.status === 422) throw new SourceError("invalid-argument", `prometheus: ${String(body.error ?? "bad request")}`);
    if (!response.ok || body.status !== "success")
      throw new SourceError("unavailable", `prometheus answered HTTP ${response.status}: ${String(body.error ?? "error")}`);
    return body;
  }

  function toSeries(raw: JsonObject): SeriesInput[] {
    const data = raw.data as { resultType?: string; result?: unknown } | undefined;
    if (data?.resultType !== "matrix" || !Array.isArray(data.result)) return [];
    return (data.result as unknown as PrometheusMatrixItem[]).map((item) => ({
      label: seriesLabel(item.metric),
      points: item.values.map(([seconds, value]) => ({ t: Math.round(seconds * 1000), v: Number(value) })),
    }));
  }

  return {
    get,
    async labelValues(label: string, match: string | undefined, context: CallContext): Promise<ReadResult> {
      if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(label)) throw new SourceError("invalid-argument", "label must be a Prometheus label name");
      const raw = await get(`/api/v1/label/${label}/values`, { "match[]": match }, context);
      return { raw };
    },
    async queryRange(query: string, fromMs: number, toMs: number, step: string | number | undefined, context: CallContext): Promise<ReadResult> {
      const stepSeconds = parseStep(step) ?? Math.max(1, Math.ceil((toMs - fromMs) / 1000 / TARGET_POINTS));
      const raw = await get("/api/v1/query_range", { query, start: String(fromMs / 1000), end: String(toMs / 1000), step: String(stepSeconds) }, context);
      return { raw, series: toSeries(raw) };
    },
    async query(query: string, timeMs: number | undefined, context: CallContext): Promise<ReadResult> {
      const raw = await get("/api/v1/query", { query, time: timeMs === undefined ? undefined : String(timeMs / 1000) }, context);
      return { raw };
    },
  };
}

/** `up{instance="a:9100", job="node"}`: the name and the labels, as Prometheus prints a series. */
function seriesLabel(metric: Record<string, string>): string {
  const { __name__: name = "", ...labels } = metric;
  const pairs = Object.keys(labels)
    .sort()
    .map((k) => `${k}=${JSON.stringify(labels[k])}`);
  return pairs.length > 0 ? `${name}{${pairs.join(", ")}}` : name || "{}";
}

/** Seconds from `30`, `30s`, `5m`, `1h`; undefined when absent. */
function parseStep(step: string | number | undefined): number | undefined {
  if (step === undefined || step === "") return undefined;
  if (typeof step === "number") {
    if (!(step > 0)) throw new SourceError("invalid-argument", "step must be positive");
    return step;
  }
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(step.trim());
  if (!match) throw new SourceError("invalid-argument", `step ${JSON.stringify(step)} is not a duration such as 30s or 5m`);
  const factor = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 }[match[2] ?? "s"]!;
  const seconds = Number(match[1]) * factor;
  if (!(seconds > 0)) throw new SourceError("invalid-argument", "step must be positive");
  return seconds;
}

// ---------------------------------------------------------------------------------------------
// Logs: the *.log files of a directory. A line starts with an RFC 3339 time; a line without one
// (a stack trace's continuation) belongs to the line before it.

const LINE_TIME = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s?(.*)$/;

function createLogFiles(dir: string) {
  async function logFiles(prefix?: string): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      throw new SourceError("unavailable", "the log directory is not readable");
    }
    return names.filter((n) => n.endsWith(".log") && (!prefix || n.startsWith(prefix))).sort();
  }

  return {
    async streams(prefix?: string): Promise<ReadResult> {
      const names = await logFiles(prefix);
      const streams = await Promise.all(
        names.map(async (name) => {
          const info = await stat(join(dir, name));
          return { name, bytes: info.size, modifiedAt: info.mtime.toISOString() };
        }),
      );
      return { raw: { streams } };
    },
    async range(query: { fromMs: number; toMs: number; file: string | undefined; contains: string; limit: number | undefined }): Promise<ReadResult> {
      const limit = Math.min(Math.max(1, Math.floor(query.limit ?? DEFAULT_LINES)), MAX_LINES);
      if (query.file !== undefined && (query.file !== basename(query.file) || !query.file.endsWith(".log"))) {
        throw new SourceError("invalid-argument", "file must be the name of a .log file in the log directory");
      }
      const names = query.file ? (await logFiles()).filter((n) => n === query.file) : await logFiles();
      if (query.file && names.length === 0) throw new SourceError("not-found", `no log file ${JSON.stringify(query.file)}`);
      const entries: EntryInput[] = [];
      for (const name of names) {
        const text = await readFile(join(dir, name), "utf8");
        let current: { t: string; line: string } | undefined;
        const flush = () => {
          if (!current) return;
          const ms = Date.parse(current.t);
          if (ms >= query.fromMs && ms <= query.toMs && current.line.includes(query.contains)) {
            entries.push({ t: current.t, line: current.line, stream: name, labels: { file: name } });
          }
        };
        for (const line of text.split(/\r?\n/)) {
          const match = LINE_TIME.exec(line);
          if (match) {
            flush();
            current = { t: match[1]!, line: match[2]! };
          } else if (current && line !== "") {
            current.line += `\n${line}`;
          }
        }
        flush();
      }
      entries.sort((a, b) => Date.parse(a.t as string) - Date.parse(b.t as string));
      // The newest lines matter most to an investigation: keep the last `limit`.
      const kept = entries.slice(-limit);
      const truncated = entries.length > kept.length;
      return {
        raw: { lines: kept.map((e) => ({ file: e.stream ?? "", time: e.t as string, text: e.line })) } as JsonValue,
        entries: kept,
        ...(truncated ? { partial: true, error: `more than ${limit} lines matched; the newest ${limit} are returned` } : {}),
      };
    },
  };
}

// ---------------------------------------------------------------------------------------------

function optionalString(params: JsonObject, name: string): string | undefined {
  const value = params[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw new SourceError("invalid-argument", `${name} must be a string`);
  return value;
}

function requiredString(params: JsonObject, name: string): string {
  const value = optionalString(params, name);
  if (!value) throw new SourceError("invalid-argument", `${name} is required`);
  return value;
}

function optionalNumber(params: JsonObject, name: string): number | undefined {
  const value = params[name];
  if (value === undefined || value === null) return undefined;
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isFinite(n)) throw new SourceError("invalid-argument", `${name} must be a number`);
  return n;
}

function windowParam(params: JsonObject, name: string, format: string): number {
  try {
    return parseWindowValue(params[name], format);
  } catch (err) {
    throw new SourceError("invalid-argument", `${name}: ${err instanceof Error ? err.message : String(err)}`);
  }
}
