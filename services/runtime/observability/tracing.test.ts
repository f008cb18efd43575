import { describe, expect, it } from "vitest";
import { currentTraceparent, injectHeaders, inSpan, logFields, tracingEnabled, tracingRequested } from "./tracing.js";

describe("the tracing switch", () => {
  it("is off with no OTEL_* variable, and on with any", () => {
    expect(tracingRequested({ PATH: "/usr/bin", DATABASE_URL: "postgres://x" })).toBe(false);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" })).toBe(true);
    expect(tracingRequested({ OTEL_SERVICE_NAME: "intake" })).toBe(true);
    expect(tracingRequested({ OTEL_TRACES_SAMPLER: "parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.1" })).toBe(true);
    // Set but empty counts as unset.
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "" })).toBe(false);
  });

  it("stays off when the SDK or the trace exporter is turned off", () => {
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "true" })).toBe(false);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "TRUE " })).toBe(false);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_TRACES_EXPORTER: "none" })).toBe(false);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_TRACES_EXPORTER: "otlp" })).toBe(true);
    expect(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "false" })).toBe(true);
  });

  it("when never started, every helper is inert: no context, no headers, no log fields", async () => {
    expect(tracingEnabled()).toBe(false);
    expect(currentTraceparent()).toBeNull();
    expect(injectHeaders({ accept: "application/json" })).toEqual({ accept: "application/json" });
    expect(logFields()).toBeUndefined();
    expect(await inSpan("unused", {}, async (span) => span)).toBeUndefined();
  });
});
