import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAddressPolicy } from "../../../runtime/egress/index.js";
import { checkCommand } from "../../check.js";
import { createSourceClient } from "../../client/source-client.js";
import type { RunningSourceServer } from "../../index.js";
import { startBareSource, type BareSource } from "../../testing/bare-source.js";
import { startFakePrometheus } from "../../testing/fake-prometheus.js";
import { createPrometheusFilesSource } from "./source.js";

// The example source, against a Prometheus-compatible API stand-in and a directory of log files:
// it passes the conformance check over HTTP and gRPC, through the shipped check command.

const TOKEN = "example-token";
const loopbackPolicy = createAddressPolicy({ allowPrivateCidrs: ["127.0.0.1/32"], requireHttps: false, allowPrivateByDefault: true });

let prometheus: Awaited<ReturnType<typeof startFakePrometheus>>;
let logDir: string;
let running: RunningSourceServer;
let broken: BareSource;
const now = Date.now();
const iso = (offsetMs: number) => new Date(now + offsetMs).toISOString();

beforeAll(async () => {
  prometheus = await startFakePrometheus();
  logDir = mkdtempSync(join(tmpdir(), "rs-example-logs-"));
  writeFileSync(
    join(logDir, "api.log"),
    [`${iso(-120_000)} started`, `${iso(-60_000)} error: boom`, "  at handler (api.js:10)", `${iso(-30_000)} recovered`, ""].join("\n"),
  );
  writeFileSync(join(logDir, "worker.log"), [`${iso(-90_000)} job 1 done`, `${iso(-7_200_000)} too old`].join("\n"));
  writeFileSync(join(logDir, "notes.txt"), "not a log file");
  running = await createPrometheusFilesSource({
    prometheusUrl: prometheus.url,
    logDir,
    auth: { bearerTokens: [TOKEN] },
    tenantHeader: "X-Scope-OrgID",
  }).listen();
  broken = await startBareSource({ rejectEveryCall: true });
});

afterAll(async () => {
  await running?.close();
  await prometheus?.close();
  await broken?.close();
  if (logDir) rmSync(logDir, { recursive: true, force: true });
});

describe("the prometheus-files example source", () => {
  it.each([[[]], [["--grpc"]]])("passes the conformance check command %s", async (flags) => {
    const { exitCode, output } = await checkCommand([running.url, ...flags], { SOURCE_TOKEN: TOKEN });
    expect(output).not.toContain("FAIL");
    expect(output).toContain("All checks passed: the service will mark this source connected.");
    expect(exitCode).toBe(0);
  });

  it("reads metrics from the Prometheus API: the tenant in its header, series labelled, sorted, NaN left out", async () => {
    const client = createSourceClient(
      { baseUrl: running.url, transport: "grpc", tenantRef: "team-a", credentials: { bearerToken: TOKEN } },
      { policy: loopbackPolicy },
    );
    const end = Math.floor(now / 60_000) * 60_000;
    const { result } = await client.read("metrics/range", { expr: "up", window: { fromMs: end - 600_000, toMs: end }, step: "60s" });
    expect(result.partial).toBe(false);
    expect(result.series.map((s) => s.label)).toEqual(['up{instance="api-1:9100", job="api"}', 'up{instance="api-2:9100", job="api"}']);
    expect(result.series[0]!.points).toHaveLength(11);
    expect(result.series[1]!.points).toHaveLength(9); // two NaN samples left out
    expect(JSON.parse(result.raw).status).toBe("success");
    const upstream = prometheus.requests.findLast((r) => r.path === "/api/v1/query_range")!;
    expect(upstream.headers["x-scope-orgid"]).toBe("team-a");
    expect(upstream.params.get("step")).toBe("60");

    const list = await client.read("metrics/list", { namespace: "http" });
    expect(JSON.parse(list.result.raw).data).toEqual(["http_requests_total"]);
  });

  it("reads logs from files: one stream per .log file, continuation lines kept, the window applied", async () => {
    const client = createSourceClient(
      { baseUrl: running.url, transport: "http", tenantRef: "team-a", credentials: { bearerToken: TOKEN } },
      { policy: loopbackPolicy },
    );
    const streams = await client.read("logs/streams", {});
    expect(JSON.parse(streams.result.raw).streams.map((s: { name: string }) => s.name)).toEqual(["api.log", "worker.log"]);

    const { result } = await client.read("logs/range", { query: "", window: { fromMs: now - 3_600_000, toMs: now } });
    expect(result.entries.map((e) => [e.stream, e.line])).toEqual([
      ["api.log", "started"],
      ["worker.log", "job 1 done"],
      ["api.log", "error: boom\n  at handler (api.js:10)"],
      ["api.log", "recovered"],
    ]);
    const errors = await client.read("logs/range", { query: "error", window: { fromMs: now - 3_600_000, toMs: now }, limit: 5 });
    expect(errors.result.entries.map((e) => e.line)).toEqual(["error: boom\n  at handler (api.js:10)"]);

    const one = await client.read("invoke", { operation: "files.read", params: { from: iso(-3_600_000), to: iso(0), file: "worker.log" } });
    expect(one.result.entries.map((e) => e.line)).toEqual(["job 1 done"]);
    const missing = await client.read("invoke", { operation: "files.read", params: { from: iso(-3_600_000), to: iso(0), file: "other.log" } });
    expect(missing.result).toMatchObject({ partial: true, error: 'not found (HTTP 404: no log file "other.log")' });
  });

  it("the check command exits 1 and names what failed for a source that rejects the credential", async () => {
    const { exitCode, output } = await checkCommand([broken.httpUrl, "--json"], { SOURCE_TOKEN: broken.token });
    expect(exitCode).toBe(1);
    const report = JSON.parse(output);
    expect(report.ok).toBe(false);
    expect(report.checks.find((c: { name: string }) => c.name === "credentials accepted")).toMatchObject({
      ok: false,
      detail: expect.stringContaining("credentials rejected"),
    });
    expect((await checkCommand([])).exitCode).toBe(2);
  });

  it("ships as a command taking the token from SOURCE_TOKEN or a file, never from the command line", async () => {
    const run = promisify(execFile);
    const { stdout } = await run("npx", ["tsx", "services/remotesource-kit/check.ts", running.url], {
      timeout: 25_000,
      env: { ...process.env, SOURCE_TOKEN: TOKEN },
    });
    expect(stdout).toContain("PASS  health fails closed");
    expect(stdout).toContain("All checks passed");
    const dir = mkdtempSync(join(tmpdir(), "check-token-"));
    try {
      writeFileSync(join(dir, "token"), `${TOKEN}\n`, { mode: 0o600 });
      const fromFile = await checkCommand([running.url, "--token-file", join(dir, "token")], {});
      expect(fromFile.exitCode, fromFile.output).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // npm echoes a script's command line, so a token there would be printed: refused.
    const onCommandLine = await checkCommand([running.url, "--token", TOKEN], {});
    expect(onCommandLine.exitCode).toBe(2);
    expect(onCommandLine.output).toMatch(/SOURCE_TOKEN/);
    expect(onCommandLine.output).not.toContain(TOKEN);
  });
});
