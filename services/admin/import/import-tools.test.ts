import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { castOf, type Cast } from "../../heartbeats/testing/kit.js";
import { admin } from "./testing/admin-command.js";

// `npm run admin -- import oncall|opsgenie`: the command as a person runs it, against a running
// service over HTTP, with the vendors' list answers in test/fixtures/.

const ROOT = join(import.meta.dirname, "../../..");
const ONCALL = join(ROOT, "test/fixtures/oncall/integrations.json");
const OPSGENIE = join(ROOT, "test/fixtures/opsgenie/heartbeats-and-integrations.json");

let app: TestApp;
let cast: Cast;
let dir: string;

beforeAll(async () => {
  app = await startApp({ env: { HEARTBEAT_SWEEP_SECONDS: "3600" } });
  cast = await castOf(app);
  dir = mkdtempSync(join(tmpdir(), "tool-export-"));
});

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await app?.stop();
});

interface Source {
  id: string;
  name: string;
  url: string;
  description?: string;
  rules: Record<string, string>[];
}

async function sources(): Promise<Source[]> {
  return (await app.call("GET", "/o/acme/custom-sources", { token: cast.member })).body.customSources ?? [];
}

async function heartbeats(): Promise<{ name: string; expectedIntervalSeconds: number; graceSeconds: number; status: string; pausedAt?: string }[]> {
  return (await app.call("GET", "/o/acme/heartbeats", { token: cast.member })).body.heartbeats;
}

async function preview(id: string, body: unknown) {
  const res = await app.call("POST", `/o/acme/custom-sources/${id}/preview`, { token: cast.admin, body: { body } });
  expect(res.status).toBe(200);
  return res.body;
}

describe("import oncall", () => {
  it("--dry-run says what it would create, reports the templates it cannot translate, and changes nothing", async () => {
    const result = await admin(["import", "oncall", ONCALL, "--org", "acme", "--url", app.url, "--dry-run"], cast.admin);
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.split("\n");
    expect(lines.filter((l) => l.startsWith("source ")).map((l) => l.split("\t").slice(0, 2))).toEqual([
      ["source checkout-webhook", "would create"],
      ["source prometheus-alertmanager", "would create"],
      ["source grafana-alerting", "would create"],
    ]);
    expect(lines.filter((l) => l.startsWith("heartbeat ")).map((l) => l.split("\t").slice(0, 3))).toEqual([
      ["heartbeat checkout-webhook", "would create", "(every 600s, grace 1s)"],
    ]);
    expect(result.stdout).toContain("  checkout-webhook slack.title: a notification template (Slack)");
    expect(result.stdout).toContain("  prometheus-alertmanager web.message: {% for");
    expect(result.stderr).toContain('skipped heartbeat of "Grafana Alerting": no timeout_seconds');
    expect(result.stderr).toContain("dry run: 4 to create, 0 to update, 0 unchanged, 0 failed, 1 skipped; nothing was changed");
    expect(await sources()).toEqual([]);
    expect(await heartbeats()).toEqual([]);
  });

  it("creates a source per integration with the translated rules, the originals in its description, and the heartbeat", async () => {
    const result = await admin(["import", "oncall", ONCALL, "--org", "acme", "--url", app.url, "--json"], cast.admin);
    expect(result.code, result.stderr).toBe(0);
    const report = JSON.parse(result.stdout);
    expect(report.sources.map((s: { name: string; action: string }) => [s.name, s.action])).toEqual([
      ["checkout-webhook", "create"],
      ["prometheus-alertmanager", "create"],
      ["grafana-alerting", "create"],
    ]);
    // The credential is shown this once, with the URL the tool posts to.
    expect(report.sources[0].secret).toMatch(/^[0-9a-f]{64}$/);
    expect(report.sources[0].url).toMatch(/\/triggers\/custom\//);
    expect(report.untranslated.map((u: { source: string; template: string }) => `${u.source} ${u.template}`).sort()).toEqual([
      "checkout-webhook acknowledge_signal",
      "checkout-webhook slack.message",
      "checkout-webhook slack.title",
      "checkout-webhook web.image_url",
      "prometheus-alertmanager sms.title",
      "prometheus-alertmanager web.message",
    ]);
    expect(report.untranslated.find((u: { template: string }) => u.template === "web.message").reason).toContain("{% for");
    expect(report.untranslated.find((u: { template: string }) => u.template === "acknowledge_signal").reason).toContain("no rule acknowledges");
    expect(report.heartbeats).toMatchObject([{ name: "checkout-webhook", action: "create", expectedIntervalSeconds: 600, graceSeconds: 1 }]);

    const [checkout, alertmanager, grafana] = await sources();
    expect(checkout!.rules.map((r) => r.name)).toEqual(["resolve signal", "alert"]);
    expect(checkout!.description).toContain('Imported from Grafana OnCall integration "Checkout webhook" (CFRPV98RPR1U8, type webhook).');
    expect(checkout!.description).toContain("--- slack.title ---\n*{{ payload.title }}* :rotating_light:");
    expect(checkout!.description).toContain('--- acknowledge_signal ---\n{{ payload.state == "acknowledged" }}');

    // The rules do what the templates did.
    const firing = await preview(checkout!.id, {
      alert_uid: "a-17",
      state: "alerting",
      title: "Checkout 5xx above 2%",
      message: "5xx at 3.1%",
      labels: { host: "web-3" },
    });
    expect(firing.matchedRule).toBe("alert");
    expect(firing.fields).toMatchObject({
      kind: "trigger",
      title: "Checkout 5xx above 2%",
      attachKey: "a-17",
      summary: "Firing: 5xx at 3.1% (host web-3)",
      link: "https://status.example.net/checkout",
    });
    const untitled = await preview(checkout!.id, {
      alert_uid: "a-18",
      state: "pending",
      message: "slow",
      link_to_upstream_details: "https://grafana.example.net/d/1",
    });
    expect(untitled.fields).toMatchObject({ title: "Checkout alert", summary: "slow (host unknown)", link: "https://grafana.example.net/d/1" });
    const resolved = await preview(checkout!.id, { alert_uid: "a-17", state: "ok" });
    expect(resolved.matchedRule).toBe("resolve signal");
    expect(resolved.fields).toMatchObject({ kind: "recovery", attachKey: "a-17" });

    const group = await preview(alertmanager!.id, {
      groupKey: '{}:{alertname="HighLoad"}',
      status: "firing",
      commonLabels: { severity: "critical" },
      groupLabels: { alertname: "HighLoad" },
    });
    expect(group.fields).toMatchObject({ title: "[CRITICAL] HighLoad", attachKey: '{}:{alertname="HighLoad"}' });
    expect((await preview(alertmanager!.id, { groupKey: "g", status: "resolved" })).matchedRule).toBe("resolve signal");
    // No templates of its own: one rule, titled after the integration.
    expect(grafana!.rules).toMatchObject([{ name: "alert", title: "'Alert from Grafana Alerting'", when: "", attachKey: "" }]);
    expect(grafana!.description).toContain("It had no templates of its own.");

    expect(await heartbeats()).toMatchObject([{ name: "checkout-webhook", expectedIntervalSeconds: 600, graceSeconds: 1 }]);
  });

  it("a second run changes nothing; a changed template updates only its source", async () => {
    const before = await sources();
    const again = await admin(["import", "oncall", ONCALL, "--org", "acme", "--url", app.url], cast.admin);
    expect(again.code, again.stderr).toBe(0);
    expect(
      again.stdout
        .split("\n")
        .filter((l) => /^(source|heartbeat) /.test(l))
        .map((l) => l.split("\t")[1]),
    ).toEqual(["unchanged", "unchanged", "unchanged", "unchanged"]);
    expect(again.stderr).toContain("0 created, 0 updated, 4 unchanged, 0 failed, 1 skipped");
    expect(await sources()).toEqual(before);

    const changed = JSON.parse(readFileSync(ONCALL, "utf8"));
    changed.results[0].templates.web.title = "{{ payload.title }} ({{ payload.state }})";
    changed.results[0].heartbeat.timeout_seconds = 900;
    writeFileSync(join(dir, "changed.json"), JSON.stringify(changed));
    const dry = await admin(["import", "oncall", join(dir, "changed.json"), "--org", "acme", "--url", app.url, "--dry-run"], cast.admin);
    expect(dry.stdout).toMatch(/^source checkout-webhook\twould update\t.*\t\(rules, description\)/m);
    expect(dry.stdout).toMatch(/^heartbeat checkout-webhook\twould update\t\(every 900s, grace 1s\)\t\(interval 600s → 900s\)/m);
    expect(await sources()).toEqual(before);
    const update = await admin(["import", "oncall", join(dir, "changed.json"), "--org", "acme", "--url", app.url], cast.admin);
    expect(update.code, update.stderr).toBe(0);
    expect(update.stderr).toContain("0 created, 2 updated, 2 unchanged");
    const after = await sources();
    expect(after[0]!.id).toBe(before[0]!.id);
    expect((await preview(after[0]!.id, { title: "T", state: "alerting" })).fields.title).toBe("T (alerting)");
    expect(after.slice(1)).toEqual(before.slice(1));
    expect((await heartbeats())[0]).toMatchObject({ expectedIntervalSeconds: 900 });
  });
});

describe("import opsgenie", () => {
  it("--dry-run changes nothing; the run registers heartbeats (a disabled one paused) and a source per API integration; a second run changes nothing", async () => {
    const dry = await admin(["import", "opsgenie", OPSGENIE, "--org", "acme", "--url", app.url, "--dry-run"], cast.admin);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(
      /^heartbeat legacy-ftp-sync\twould create\t\(every 21600s, grace 1s, paused\)\thttps:\/\/api\.opsgenie\.com\/v2\/heartbeats\/Legacy%20FTP%20Sync\/ping/m,
    );
    expect(dry.stderr).toContain('skipped Opsgenie Email integration "Default Email"');
    const names = (await heartbeats()).map((h) => h.name);
    expect(names).toEqual(["checkout-webhook"]);

    const result = await admin(["import", "opsgenie", OPSGENIE, "--org", "acme", "--url", app.url], cast.admin);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain("5 created, 0 updated, 0 unchanged, 0 failed, 1 skipped");
    const all = await heartbeats();
    expect(all.find((h) => h.name === "nightly-etl")).toMatchObject({
      expectedIntervalSeconds: 86_400,
      graceSeconds: 1,
      status: expect.not.stringMatching(/paused/),
    });
    expect(all.find((h) => h.name === "queue-consumer")).toMatchObject({ expectedIntervalSeconds: 600 });
    // Disabled there: paused here, so it does not alert until its job pings.
    expect(all.find((h) => h.name === "legacy-ftp-sync")).toMatchObject({ expectedIntervalSeconds: 21_600, status: "paused" });
    expect(result.stdout).toMatch(
      /^heartbeat legacy-ftp-sync\tcreated\t\(every 21600s, grace 1s, paused\)\thttps:\/\/api\.opsgenie\.com\/v2\/heartbeats\/Legacy%20FTP%20Sync\/ping\thttp/m,
    );

    const billing = (await sources()).find((s) => s.name === "billing-api")!;
    expect(billing.description).toContain('Imported from Opsgenie API integration "Billing API" (4513b7ea-3b91-438f-b7e4-e3e54af9147c, team payments).');
    const created = JSON.parse(readFileSync(join(ROOT, "test/fixtures/opsgenie/create-alert-full.json"), "utf8"));
    const mapped = await preview(billing.id, created);
    expect(mapped.fields).toMatchObject({ kind: "trigger", title: created.message, attachKey: created.alias });
    expect((await preview(billing.id, { message: "m", priority: "P1" })).fields).toMatchObject({ severity: "sev1", attachKey: "" });
    expect((await sources()).find((s) => s.name === "old-deploy-hook")).toBeDefined();

    const again = await admin(["import", "opsgenie", OPSGENIE, "--org", "acme", "--url", app.url], cast.admin);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain("0 created, 0 updated, 5 unchanged, 0 failed, 1 skipped");
    expect((await heartbeats()).find((h) => h.name === "legacy-ftp-sync")).toMatchObject({ status: "paused" });
  });
});

describe("errors say what to do", () => {
  it("a wrong file names the field and what was expected", async () => {
    writeFileSync(join(dir, "bad-unit.json"), JSON.stringify({ data: { heartbeats: [{ name: "x", interval: 2, intervalUnit: "weeks", enabled: true }] } }));
    const unit = await admin(["import", "opsgenie", join(dir, "bad-unit.json"), "--org", "acme", "--url", app.url, "--dry-run"]);
    expect(unit.code).toBe(1);
    expect(unit.stderr).toContain("not Opsgenie heartbeats: data.heartbeats[0].intervalUnit: expected intervalUnit: minutes, hours or days");
    writeFileSync(join(dir, "bad-oncall.json"), JSON.stringify({ count: 1, next: null, previous: null, results: [{ name: "x", type: "webhook" }] }));
    const id = await admin(["import", "oncall", join(dir, "bad-oncall.json"), "--org", "acme", "--dry-run"]);
    expect(id.code).toBe(1);
    expect(id.stderr).toContain("results[0].id: expected the integration's id, a string");
    writeFileSync(join(dir, "alerts.json"), JSON.stringify({ alerts: [] }));
    expect((await admin(["import", "oncall", join(dir, "alerts.json"), "--org", "acme", "--dry-run"])).stderr).toContain(
      "expected the answer of GET /api/v1/integrations/",
    );
    writeFileSync(join(dir, "cut.json"), '{"count": 1, "results": [{"id": "C1"');
    expect((await admin(["import", "oncall", join(dir, "cut.json"), "--org", "acme", "--dry-run"])).stderr).toContain("the file ends inside an object");
  });

  it("leaves alone a source of the same name that it did not make", async () => {
    const made = await app.call("POST", "/o/acme/custom-sources", { token: cast.admin, body: { name: "hand-made", rules: [{ title: "'mine'" }] } });
    expect(made.status).toBe(201);
    writeFileSync(
      join(dir, "clash.json"),
      JSON.stringify({ data: { id: "9f0e1d2c-3b4a-4958-8776-655443322110", name: "Hand Made", type: "API", enabled: true } }),
    );
    const clash = await admin(["import", "opsgenie", join(dir, "clash.json"), "--org", "acme", "--url", app.url], cast.admin);
    expect(clash.code).toBe(1);
    expect(clash.stderr).toContain("a custom source named hand-made exists that this import did not make");
    expect((await sources()).find((s) => s.name === "hand-made")!.rules).toMatchObject([{ title: "'mine'" }]);
  });

  it("an unreachable service, a wrong key, a member's key and no key", async () => {
    const down = await admin(["import", "opsgenie", OPSGENIE, "--org", "acme", "--url", "http://127.0.0.1:9"], cast.admin);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain("cannot reach the service at http://127.0.0.1:9");
    const wrong = await admin(["import", "opsgenie", OPSGENIE, "--org", "acme", "--url", app.url], "not-a-key");
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain("refused the token in WARROOM_TOKEN (401");
    const member = await admin(["import", "oncall", ONCALL, "--org", "acme", "--url", app.url], cast.member);
    expect(member.code).toBe(1);
    expect(member.stderr).toContain("may not change acme (403");
    expect((await admin(["import", "oncall", ONCALL, "--org", "acme", "--url", app.url])).stderr).toContain("WARROOM_TOKEN is not set");
  });
});
