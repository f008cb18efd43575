import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";
import { startClusterApp } from "../support/cluster.js";

const datadog = JSON.parse(readFileSync("test/fixtures/datadog/custom-body-triggered.json", "utf8"));

describe("metrics", () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startApp();
  });
  afterAll(async () => {
    await app?.stop();
  });

  it("serves Prometheus metrics: requests, deliveries, RPC latency and outbox lag", async () => {
    const owner = await app.ownerToken();
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    const opened = await app.call("POST", "/triggers", { token: ingest, body: { ...datadog, alert_id: "metrics-1" } });
    expect(opened.status).toBe(201);
    // No OTEL_* variable: tracing is off, and nothing names a trace.
    expect(opened.headers.get("traceparent")).toBeNull();
    expect((await app.call("POST", "/triggers", { token: ingest, body: { nothing: "recognizable" } })).status).toBe(422);
    // Metrics are on METRICS_PORT, never on the public port.
    expect((await fetch(`${app.url}/metrics`)).status).toBe(404);
    const res = await fetch(app.process.metricsUrl!);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    const text = await res.text();
    expect(text).toMatch(/warroom_http_requests_total\{route="\/triggers",method="POST",status="201"\} 1/);
    expect(text).toMatch(/warroom_http_requests_total\{route="\/triggers",method="POST",status="422"\} 1/);
    expect(text).toMatch(/warroom_trigger_deliveries_total\{source="metrics-monitor",outcome="opened"\} 1/);
    expect(text).toMatch(/warroom_trigger_deliveries_total\{source="shared",outcome="refused"\} 1/);
    expect(text).toMatch(/warroom_rpc_duration_seconds_count\{method="warroom.incidents.v1.IncidentsService\/Record",transport="in-memory",code="ok"\} 1/);
    expect(text).toMatch(/warroom_outbox_lag_seconds\{service="incidents"\} [0-9.e-]+/);
    expect(text).toMatch(/warroom_http_request_duration_seconds_bucket/);
    // The pool, read at each scrape; the heartbeat sweeper ran once at start.
    expect(text).toMatch(/^warroom_db_pool_connections\{state="max"\} 10$/m);
    expect(text).toMatch(/^warroom_db_pool_waiting_queries 0$/m);
    expect(text).toMatch(/^warroom_heartbeat_sweep_interval_seconds 300$/m);
    expect(text).toMatch(/^warroom_heartbeat_sweeps_total\{result="ok"\} [1-9]/m);
    const lastSweep = Number(/^warroom_heartbeat_sweep_last_success_timestamp_seconds (\S+)$/m.exec(text)?.[1]);
    expect(Math.abs(lastSweep - Date.now() / 1000)).toBeLessThan(120);
    expect(text).toMatch(/^warroom_heartbeat_sweep_duration_seconds_count [1-9]/m);
    // One-process mode has no NATS connection to report.
    expect(text).not.toMatch(/^warroom_nats_connected /m);
  });
});

describe("a request id across separate processes", () => {
  it("follows a delivery from the gateway through NATS to the incident core", async () => {
    const app = await startClusterApp({ env: { LOG_LEVEL: "debug" }, output: "capture" });
    try {
      const owner = await app.ownerToken();
      const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
      const requestId = `trace-${Date.now()}`;
      const res = await app.call("POST", "/triggers", { token: ingest, body: { ...datadog, alert_id: "traced" }, headers: { "x-request-id": requestId } });
      expect(res.status).toBe(201);
      expect(res.headers.get("x-request-id")).toBe(requestId);
      const linesOf = (name: string) =>
        app.cluster.processes
          .filter((p) => p.name === name)
          .flatMap((p) => p.output)
          .filter((line) => line.includes(requestId))
          .map((line) => JSON.parse(line) as { requestId: string; method?: string });
      const served = (name: string, method: string) => linesOf(name).some((l) => l.method === method);
      const calls = [
        ["intake", "warroom.intake.v1.IntakeService/Deliver"],
        ["identity", "warroom.identity.v1.IdentityService/ResolveIngestToken"],
        ["incidents", "warroom.incidents.v1.IncidentsService/Record"],
      ] as const;
      // Each process's output reaches this one through its own pipe, in its own time: the answer
      // can come back before a line written earlier has been read. Waits for all three.
      const deadline = Date.now() + 5000;
      while (!calls.every(([name, method]) => served(name, method)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      for (const [name, method] of calls) expect(served(name, method), `${name} logged ${method}`).toBe(true);
      for (const name of ["intake", "identity", "incidents"]) for (const line of linesOf(name)) expect(line.requestId).toBe(requestId);
      // Either intake replica may have taken the delivery.
      const intakes = app.cluster.processes.filter((p) => p.name === "intake");
      const metrics = (await Promise.all(intakes.map(async (p) => (await fetch(`http://127.0.0.1:${p.metricsPort}/metrics`)).text()))).join("\n");
      expect(metrics).toMatch(/warroom_rpc_duration_seconds_count\{method="warroom.incidents.v1.IncidentsService\/Record",transport="nats",code="ok"\}/);
    } finally {
      await app.stop();
    }
  }, 120_000);
});
