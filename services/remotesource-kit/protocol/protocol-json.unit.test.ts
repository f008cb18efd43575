import { create, fromBinary, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  CapabilitiesResponseSchema,
  HealthResponseSchema,
  InvokeRequestSchema,
  LogEntrySchema,
  LogsRangeRequestSchema,
  LogsStreamsRequestSchema,
  MetricsListRequestSchema,
  MetricsRangeRequestSchema,
  OperationDescriptorSchema,
  PointSchema,
  RawResultSchema,
  RawSeriesSchema,
  SourceService,
  TenantSchema,
  WindowBoundsSchema,
  WindowSpecSchema,
} from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { decodeProtocolJson, encodeProtocolJson, fromProtocolJson, ProtocolJsonError, toProtocolJson } from "./protocol-json.js";
import { PROTOCOL_ROUTES } from "./protocol-routes.js";

// The spec's "Remote source protocol" tables, written out here: the schema (and so both the HTTP
// and the gRPC form) must not drift from them. Version 1 is additive only; a field added to the
// schema is added here on purpose, with the spec.

const SPEC_ROUTES = [
  ["GET", "/v1/capabilities", "Capabilities"],
  ["GET", "/v1/health", "Health"],
  ["POST", "/v1/invoke", "Invoke"],
  ["POST", "/v1/metrics/list", "MetricsList"],
  ["POST", "/v1/metrics/range", "MetricsRange"],
  ["POST", "/v1/logs/streams", "LogsStreams"],
  ["POST", "/v1/logs/range", "LogsRange"],
];

/** Field names as the spec writes them; `?` marks the optional ones. */
const SPEC_FIELDS: Array<[DescMessage, string[]]> = [
  [CapabilitiesResponseSchema, ["protocolVersion", "source", "kinds", "operations"]],
  [HealthResponseSchema, ["ok", "detail?"]],
  [InvokeRequestSchema, ["operation", "params", "tenant"]],
  [MetricsListRequestSchema, ["namespace?", "match?", "tenant"]],
  [MetricsRangeRequestSchema, ["expr", "window", "step?", "tenant"]],
  [LogsStreamsRequestSchema, ["prefix?", "label?", "tenant"]],
  [LogsRangeRequestSchema, ["query", "window", "limit?", "tenant"]],
  [RawResultSchema, ["source", "operation", "params", "fetchedAt", "raw", "partial", "error", "series?", "entries?"]],
  [OperationDescriptorSchema, ["operation", "description", "params", "kind", "canonical?", "window?"]],
  [WindowSpecSchema, ["start", "end", "step?", "format", "stepFormat?", "minStepSeconds?"]],
  [WindowBoundsSchema, ["fromMs", "toMs"]],
  [TenantSchema, ["ref"]],
  [RawSeriesSchema, ["label", "unit?", "points"]],
  [PointSchema, ["t", "v"]],
  [LogEntrySchema, ["t", "line", "labels?", "stream?"]],
];

describe("the protocol schema against the spec's tables", () => {
  it("has exactly the spec's HTTP paths, methods and gRPC rpcs, from the google.api.http annotations", () => {
    expect(PROTOCOL_ROUTES.map((r) => [r.httpMethod, r.path, r.method.name])).toEqual(SPEC_ROUTES);
    expect(SourceService.typeName).toBe("warroom.sourceprotocol.v1.SourceService");
  });

  it.each(SPEC_FIELDS.map(([schema, fields]) => [schema.name, schema, fields] as const))("%s has the spec's JSON field names", (_name, schema, fields) => {
    expect(schema.fields.map((f) => f.jsonName)).toEqual(fields.map((f) => f.replace(/\?$/, "")));
    // An optional scalar of the spec has explicit presence in the schema, so "unset" is not "empty".
    for (const spelled of fields.filter((f) => f.endsWith("?"))) {
      const field = schema.fields.find((f) => f.jsonName === spelled.slice(0, -1))!;
      if (field.fieldKind === "scalar") expect(field.proto.proto3Optional, `${schema.name}.${field.jsonName}`).toBe(true);
    }
  });
});

describe("the HTTP-JSON form", () => {
  const rangeRequest = create(MetricsRangeRequestSchema, {
    expr: "rate(http_requests_total[5m])",
    window: { fromMs: 1_714_564_800_000n, toMs: 1_714_568_400_000n },
    tenant: { ref: "tenant-1" },
  });

  it("writes a request with fromMs/toMs as JSON numbers, tenant as {ref}, and leaves unset optional fields out", () => {
    expect(JSON.parse(encodeProtocolJson(MetricsRangeRequestSchema, rangeRequest))).toEqual({
      expr: "rate(http_requests_total[5m])",
      window: { fromMs: 1_714_564_800_000, toMs: 1_714_568_400_000 },
      tenant: { ref: "tenant-1" },
    });
    expect(toProtocolJson(InvokeRequestSchema, create(InvokeRequestSchema, { operation: "op", tenant: { ref: "t" } }))).toEqual({
      operation: "op",
      params: {},
      tenant: { ref: "t" },
    });
  });

  it("reads fromMs/toMs given as numbers or as strings", () => {
    for (const window of [
      { fromMs: 1_714_564_800_000, toMs: 1_714_568_400_000 },
      { fromMs: "1714564800000", toMs: "1714568400000" },
    ]) {
      const message = fromProtocolJson(MetricsRangeRequestSchema, { expr: "rate(http_requests_total[5m])", window, tenant: { ref: "tenant-1" } });
      expect(message.window).toMatchObject({ fromMs: 1_714_564_800_000n, toMs: 1_714_568_400_000n });
    }
  });

  const fullResult = create(RawResultSchema, {
    source: "prom-eu",
    operation: "metrics/range",
    params: { expr: "up", window: { fromMs: 1, toMs: 2 } },
    fetchedAt: "2024-05-01T12:00:00.000Z",
    raw: JSON.stringify({ status: "success", data: { resultType: "matrix", result: [] } }),
    partial: false,
    series: [{ label: "up", points: [{ t: "2024-05-01T12:00:00Z", v: 1 }] }],
    entries: [{ t: "2024-05-01T12:00:00Z", line: "hello", labels: { level: "info" }, stream: "app" }],
  });

  it("writes a RawResult with raw as an object, error null, and series/entries", () => {
    expect(JSON.parse(encodeProtocolJson(RawResultSchema, fullResult))).toEqual({
      source: "prom-eu",
      operation: "metrics/range",
      params: { expr: "up", window: { fromMs: 1, toMs: 2 } },
      fetchedAt: "2024-05-01T12:00:00.000Z",
      raw: { status: "success", data: { resultType: "matrix", result: [] } },
      partial: false,
      error: null,
      series: [{ label: "up", points: [{ t: "2024-05-01T12:00:00Z", v: 1 }] }],
      entries: [{ t: "2024-05-01T12:00:00Z", line: "hello", labels: { level: "info" }, stream: "app" }],
    });
  });

  it("writes a partial RawResult with its error, and leaves out empty series, entries and labels", () => {
    const partial = create(RawResultSchema, {
      source: "s",
      operation: "logs/range",
      fetchedAt: "2024-05-01T12:00:00Z",
      raw: "[]",
      partial: true,
      error: "response too large",
    });
    expect(toProtocolJson(RawResultSchema, partial)).toEqual({
      source: "s",
      operation: "logs/range",
      params: {},
      fetchedAt: "2024-05-01T12:00:00Z",
      raw: [],
      partial: true,
      error: "response too large",
    });
    const entry = create(LogEntrySchema, { t: "2024-05-01T12:00:00Z", line: "x" });
    expect(toProtocolJson(LogEntrySchema, entry)).toEqual({ t: "2024-05-01T12:00:00Z", line: "x" });
  });

  it("keeps raw as JSON text in the schema, which is what gRPC carries, and round-trips both forms", () => {
    const fromHttp = fromProtocolJson(RawResultSchema, JSON.parse(encodeProtocolJson(RawResultSchema, fullResult)));
    expect(typeof fromHttp.raw).toBe("string");
    expect(JSON.parse(fromHttp.raw)).toEqual({ status: "success", data: { resultType: "matrix", result: [] } });
    const overGrpc = fromBinary(RawResultSchema, toBinary(RawResultSchema, fromHttp));
    expect(overGrpc.raw).toBe(fromHttp.raw);
    expect(toProtocolJson(RawResultSchema, overGrpc)).toEqual(toProtocolJson(RawResultSchema, fullResult));
    // error: null reads as unset.
    expect(fromProtocolJson(RawResultSchema, { source: "s", operation: "o", fetchedAt: "", raw: {}, partial: false, error: null }).error).toBeUndefined();
  });

  it("ignores fields it does not know (version 1 is additive) and names the field it cannot read", () => {
    const capabilities = decodeProtocolJson(
      CapabilitiesResponseSchema,
      JSON.stringify({ protocolVersion: "1", source: "s", kinds: [], operations: [], addedLater: true }),
    );
    expect(capabilities.protocolVersion).toBe("1");
    expect(() => fromProtocolJson(LogsRangeRequestSchema, { query: "", window: { fromMs: 1.5, toMs: 2 }, tenant: { ref: "t" } })).toThrow(ProtocolJsonError);
    expect(() => fromProtocolJson(LogsRangeRequestSchema, { query: "", window: { fromMs: 1.5, toMs: 2 }, tenant: { ref: "t" } })).toThrow(
      /^invalid value for WindowBounds\.fromMs: .*1\.5/,
    );
    expect(() => fromProtocolJson(HealthResponseSchema, [])).toThrow("HealthResponse must be a JSON object");
    expect(() => decodeProtocolJson(HealthResponseSchema, "{")).toThrow("HealthResponse is not valid JSON");
  });
});
