import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";
import { describe, expect, it } from "vitest";
import { registry } from "../../services/runtime/observability/metrics.js";

// The service's own alert rules and dashboard (deploy/observability/), checked with Debian's
// promtool and against the metrics the code exports and the runbook in docs/OPERATIONS.md.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const rulesPath = join(root, "deploy/observability/warroom-rules.yml");
const rulesTestPath = join(root, "test/deploy/prometheus/warroom-rules.test.yml");
const dashboardPath = join(root, "deploy/observability/grafana-dashboard.json");
const operations = readFileSync(join(root, "docs/OPERATIONS.md"), "utf8");

interface AlertRule {
  alert: string;
  expr: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

const rules = (parse(readFileSync(rulesPath, "utf8")) as { groups: { rules: AlertRule[] }[] }).groups.flatMap((g) => g.rules);
const dashboard = JSON.parse(readFileSync(dashboardPath, "utf8")) as { panels: { title: string; type: string; targets?: { expr: string }[] }[] };

function promtool(...args: string[]) {
  const result = spawnSync("promtool", args, { cwd: root, encoding: "utf8" });
  if (result.error) throw new Error(`promtool is not installed (Debian package prometheus): ${result.error.message}`);
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

/** GitHub's anchor for a Markdown heading. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

const anchors = new Set(
  operations
    .split("\n")
    .filter((line) => /^#{1,6} /.test(line))
    .map((line) => anchorOf(line.replace(/^#+ /, ""))),
);

/** Metric names the code registers, with the series a histogram adds. */
const exported = new Set(
  (registry.getMetricsAsArray() as unknown as { name: string; type?: string }[]).flatMap((m) => [
    m.name,
    `${m.name}_bucket`,
    `${m.name}_sum`,
    `${m.name}_count`,
  ]),
);
function metricNames(expr: string): string[] {
  return [...new Set(expr.match(/\bwarroom_[a-z0-9_]+/g) ?? [])];
}

describe("alert rules of the service itself", () => {
  it("pass promtool check rules", () => {
    const { status, output } = promtool("check", "rules", rulesPath);
    expect(output).toMatch(/SUCCESS: \d+ rules found/);
    expect(status, output).toBe(0);
  });

  it("pass their promtool unit tests", () => {
    const { status, output } = promtool("test", "rules", rulesTestPath);
    expect(status, output).toBe(0);
    expect(output).toContain("SUCCESS");
  });

  it("cover the failures the service must report, each tested firing and quiet", () => {
    expect(rules.map((r) => r.alert).sort()).toEqual(
      [
        "WarroomChatWebhookFailures",
        "WarroomDatabasePoolSaturated",
        "WarroomDeadLetters",
        "WarroomDeliveryErrors",
        "WarroomDeliveryLatencyHigh",
        "WarroomHeartbeatSweepFailing",
        "WarroomHeartbeatSweepLate",
        "WarroomNatsDisconnected",
        "WarroomOutboxLag",
        "WarroomSubscriptionBacklog",
        "WarroomSubscriptionDeliveriesFailing",
        "WarroomSubscriptionDeliveriesGivenUp",
        "WarroomTargetDown",
      ].sort(),
    );
    const tests = (
      parse(readFileSync(rulesTestPath, "utf8")) as { tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[] }
    ).tests.flatMap((t) => t.alert_rule_test);
    for (const rule of rules) {
      const own = tests.filter((t) => t.alertname === rule.alert);
      expect(
        own.some((t) => t.exp_alerts.length > 0),
        `${rule.alert} is tested firing`,
      ).toBe(true);
      expect(
        own.some((t) => t.exp_alerts.length === 0),
        `${rule.alert} is tested quiet`,
      ).toBe(true);
    }
  });

  it("link each alert to its runbook section in docs/OPERATIONS.md and carry a severity", () => {
    for (const rule of rules) {
      expect(rule.annotations.runbook_url, rule.alert).toBe(`docs/OPERATIONS.md#${rule.alert.toLowerCase()}`);
      expect(anchors.has(rule.alert.toLowerCase()), `docs/OPERATIONS.md has a section ${rule.alert}`).toBe(true);
      expect(["critical", "warning"]).toContain(rule.labels.severity);
      expect(rule.annotations.summary, rule.alert).toBeTruthy();
    }
  });

  it("watch only metrics the service exports, each described in docs/OPERATIONS.md", () => {
    const used = new Set([
      ...rules.flatMap((r) => metricNames(r.expr)),
      ...dashboard.panels.flatMap((p) => (p.targets ?? []).flatMap((t) => metricNames(t.expr))),
    ]);
    expect(used.size).toBeGreaterThan(10);
    for (const name of used) {
      expect(exported.has(name), `${name} is exported`).toBe(true);
      const base = name.replace(/_(bucket|sum|count)$/, "");
      expect(operations, `docs/OPERATIONS.md describes ${base}`).toContain(`\`${base}`);
    }
    for (const name of registry.getMetricsAsArray().map((m) => (m as unknown as { name: string }).name)) {
      if (!name.startsWith("warroom_")) continue;
      expect(operations, `docs/OPERATIONS.md describes ${name}`).toContain(`\`${name}`);
    }
  });

  it("have a dashboard panel per alert, over the same expression's metrics", () => {
    for (const rule of rules) {
      const panel = dashboard.panels.find((p) => p.title.includes(`(${rule.alert})`));
      expect(panel, `a panel shows ${rule.alert}`).toBeDefined();
      const shown = new Set(panel!.targets!.flatMap((t) => metricNames(t.expr)));
      for (const name of metricNames(rule.expr)) expect(shown.has(name), `${rule.alert}'s panel shows ${name}`).toBe(true);
    }
  });
});
