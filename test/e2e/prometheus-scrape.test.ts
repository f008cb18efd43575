import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";
import { freePort, startPrivateNats, type PrivateNats } from "../support/nats-server.js";

// A real Prometheus 2.x (Debian's package) scrapes a running service every second and evaluates
// the service's own alert rules, deploy/observability/warroom-rules.yml, unchanged.

const datadog = JSON.parse(readFileSync("test/fixtures/datadog/custom-body-triggered.json", "utf8"));
const rulesFile = resolve("deploy/observability/warroom-rules.yml");

interface Alert {
  labels: Record<string, string>;
  state: "pending" | "firing";
}

describe("Prometheus scraping the service", () => {
  let nats: PrivateNats;
  let app: TestApp;
  let prometheus: ChildProcess | undefined;
  let prometheusUrl: string;
  let dir: string;
  let target: string;
  const output: string[] = [];

  beforeAll(async () => {
    nats = await startPrivateNats();
    app = await startApp({ nats: nats.url });
    // Metrics are served on METRICS_PORT only, never on the public port.
    target = new URL(app.process.metricsUrl!).host;
    dir = mkdtempSync(join(tmpdir(), "wr-prometheus-"));
    writeFileSync(
      join(dir, "prometheus.yml"),
      [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "  evaluation_interval: 1s",
        "rule_files:",
        `  - ${JSON.stringify(rulesFile)}`,
        "scrape_configs:",
        "  - job_name: warroom",
        "    static_configs:",
        `      - targets: [${JSON.stringify(target)}]`,
        "",
      ].join("\n"),
    );
    const port = await freePort();
    prometheusUrl = `http://127.0.0.1:${port}`;
    prometheus = spawn(
      "prometheus",
      [
        `--config.file=${join(dir, "prometheus.yml")}`,
        `--storage.tsdb.path=${join(dir, "data")}`,
        `--web.listen-address=127.0.0.1:${port}`,
        "--log.level=warn",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    prometheus.stdout!.on("data", (d) => output.push(String(d)));
    prometheus.stderr!.on("data", (d) => output.push(String(d)));
    await eventually(async () => (await fetch(`${prometheusUrl}/-/ready`)).status === 200, "Prometheus is ready");
  });

  afterAll(async () => {
    if (prometheus && prometheus.exitCode === null) {
      const exited = new Promise((r) => prometheus!.once("exit", r));
      prometheus.kill("SIGTERM");
      await exited;
    }
    await app?.stop();
    await nats?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function query(expr: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
    const res = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await res.json()) as { status: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] } };
    expect(body.status).toBe("success");
    return body.data.result;
  }

  async function alerts(name: string): Promise<Alert[]> {
    const body = (await (await fetch(`${prometheusUrl}/api/v1/alerts`)).json()) as { data: { alerts: Alert[] } };
    return body.data.alerts.filter((a) => a.labels.alertname === name);
  }

  async function eventually(check: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await check().catch(() => false)) return;
      if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}\n${output.join("")}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  it("loads the rules, scrapes deliveries, and raises WarroomNatsDisconnected only while NATS is down", async () => {
    const groups = (await (await fetch(`${prometheusUrl}/api/v1/rules`)).json()) as { data: { groups: { rules: { name: string; health: string }[] }[] } };
    const loaded = groups.data.groups.flatMap((g) => g.rules);
    expect(loaded.map((r) => r.name)).toContain("WarroomNatsDisconnected");

    const owner = await app.ownerToken();
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    expect((await app.call("POST", "/triggers", { token: ingest, body: { ...datadog, alert_id: "scraped-1" } })).status).toBe(201);

    await eventually(async () => (await query(`up{job="warroom"}`))[0]?.value[1] === "1", "the target is up");
    await eventually(
      async () => (await query(`warroom_trigger_deliveries_total{job="warroom",source="metrics-monitor",outcome="opened"}`))[0]?.value[1] === "1",
      "the delivery is scraped",
    );
    await eventually(async () => (await query(`warroom_nats_connected{job="warroom"}`))[0]?.value[1] === "1", "NATS reads as connected");
    const pool = await query(`warroom_db_pool_connections{job="warroom",state="max"}`);
    expect(pool[0]?.value[1]).toBe("10");
    // Every rule evaluates without error against the real series.
    await eventually(async () => {
      const rules = ((await (await fetch(`${prometheusUrl}/api/v1/rules`)).json()) as typeof groups).data.groups.flatMap((g) => g.rules);
      return rules.every((r) => r.health === "ok");
    }, "every rule has been evaluated healthy");
    expect(await alerts("WarroomNatsDisconnected")).toEqual([]);

    await nats.stop();
    await eventually(async () => (await alerts("WarroomNatsDisconnected")).some((a) => a.labels.instance === target), "the alert is raised");
    const [raised] = await alerts("WarroomNatsDisconnected");
    // It waits out its `for: 1m` as pending before it fires; a reconnect within the minute clears it.
    expect(raised!.state).toBe("pending");
    expect(raised!.labels.severity).toBe("critical");

    await nats.start();
    await eventually(async () => (await alerts("WarroomNatsDisconnected")).length === 0, "the alert clears after NATS returns");
  }, 120_000);
});
