import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

const ROOT = join(import.meta.dirname, "../..");

/**
 * The pages whose `sh` blocks run, in this order, in one shell: the README's quickstart sets the
 * session and ingest token the others use, and a later page may use what an earlier one made (the
 * heartbeat `nightly-backup`, the incidents, the custom sources).
 */
const PAGES = [
  "README.md",
  "docs/getting-started.md",
  "docs/how-to/metrics-monitors.md",
  "docs/how-to/cloud-monitors.md",
  "docs/how-to/log-analytics.md",
  "docs/how-to/error-tracking.md",
  "docs/how-to/alertmanager.md",
  "docs/how-to/grafana.md",
  "docs/how-to/chat-workflows.md",
  "docs/how-to/heartbeats.md",
  "docs/how-to/drop-in-receivers.md",
  "docs/how-to/moving-from-other-tools.md",
  "docs/how-to/custom-sources.md",
  "docs/how-to/grouping.md",
  "docs/how-to/correlation.md",
  "docs/how-to/respond-to-incidents.md",
  "docs/how-to/subscriptions.md",
  "docs/how-to/config-as-code.md",
  "docs/how-to/members-and-credentials.md",
  "docs/reference/configuration.md",
  "docs/reference/api.md",
];

/** The manual's pages (the README, the tutorial, how-to, reference, explanation), from the root. */
function manualPages(): string[] {
  const folders = ["docs/how-to", "docs/reference", "docs/explanation"];
  const nested = folders.flatMap((folder) =>
    readdirSync(join(ROOT, folder), { recursive: true, encoding: "utf8" })
      .filter((name) => name.endsWith(".md"))
      .map((name) => relative(ROOT, join(ROOT, folder, name))),
  );
  return ["README.md", "docs/getting-started.md", ...nested];
}

interface Example {
  /** The page and line the block starts on. */
  page: string;
  line: number;
  code: string;
}

/**
 * A page's `sh` blocks, in order, indentation removed (a block inside a list item is indented).
 * A block marked `sh norun` (cloning, starting the service, development set-up) is left out.
 */
function shellExamples(page: string, markdown: string): Example[] {
  const examples: Example[] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\S*)(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, lang, info] = open;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++) body.push(lines[j]!.slice(indent!.length));
    if (lang === "sh" && !/\bnorun\b/.test(info!)) examples.push({ page, line: i + 1, code: body.join("\n") });
    i = j;
  }
  return examples;
}

/**
 * A bound that detects a hang, not a budget: the examples take about a minute on a quiet machine
 * (three of them start the admin command under tsx), several times that while other runs load
 * every core.
 */
const SCRIPT_TIMEOUT_MS = 600_000;

function runBash(script: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile("bash", ["-c", script], { cwd: ROOT, timeout: SCRIPT_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err?.killed) stderr += `\nthe examples did not finish within ${SCRIPT_TIMEOUT_MS / 1000} s and were stopped`;
      resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

describe("the shell examples of the README and the manual", () => {
  const examples = PAGES.flatMap((page) => shellExamples(page, readFileSync(join(ROOT, page), "utf8")));
  let app: TestApp;
  let run: { code: number; stdout: string; stderr: string };

  beforeAll(async () => {
    // The quickstart's bootstrap owner, so that its login works as written.
    app = await startApp({ env: { BOOTSTRAP_OWNER_EMAIL: "you@example.com", BOOTSTRAP_OWNER_PASSWORD: "change me now" } });
    const host = new URL(app.url).host;
    // Every block in order, in one shell (a later block uses the variables an earlier one set).
    // An HTTP error fails the call, and any failing command ends the run naming its block.
    const script = [
      "set -euo pipefail",
      // A call the README makes without -f/--fail gets --fail-with-body: an HTTP error is a failure.
      'curl() { local a; for a in "$@"; do case "$a" in --fail*) command curl --max-time 30 "$@"; return;; --*) ;; -*f*) command curl --max-time 30 "$@"; return;; esac; done; command curl --fail-with-body --max-time 30 "$@"; }',
      ...examples.map((example) => `echo "== ${example.page} line ${example.line}"\n${example.code.replaceAll("localhost:8080", host)}\necho`),
    ].join("\n");
    run = await runBash(script);
  }, SCRIPT_TIMEOUT_MS + 60_000);

  afterAll(async () => {
    await app?.stop();
  });

  it("runs every page of the manual that has a runnable example", () => {
    const withExamples = manualPages().filter((page) => shellExamples(page, readFileSync(join(ROOT, page), "utf8")).length > 0);
    expect(PAGES).toEqual(expect.arrayContaining(withExamples));
    for (const page of PAGES) expect(withExamples, `${page} has no runnable sh block`).toContain(page);
  });

  it("has a runnable example for every source, for Connect and for gRPC", () => {
    const all = examples.map((e) => e.code).join("\n");
    for (const route of ["/triggers ", "/triggers/alertrouter ", "/triggers/chat/acme ", "/o/acme/heartbeats/nightly-backup/ping "]) {
      expect(all).toContain(`localhost:8080${route}`);
    }
    for (const fixture of ["aws/", "azure/", "sentry/", "alertmanager/", "grafana/"]) expect(all).toContain(`test/fixtures/${fixture}`);
    expect(all).toContain('"alert_type"');
    expect(all).toMatch(/buf curl .*--protocol connect/);
    expect(all).toMatch(/buf curl .*--protocol grpc/);
  });

  it("runs every example to the end against a started service", () => {
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
  });

  it("opened what the examples say, one incident per source", async () => {
    const login = await app.call("POST", "/auth/login", { body: { email: "you@example.com", password: "change me now", orgSlug: "acme" } });
    const token = login.body.accessToken as string;
    const res = await app.call("GET", "/o/acme/incidents", { token });
    expect(res.status).toBe(200);
    const sources = (res.body.incidents as { source: string }[]).map((i) => i.source).sort();
    // At least the examples of the sources above (the pages may show more).
    expect(sources).toEqual(
      expect.arrayContaining(["alert-router", "chat", "cloud-monitor", "cloud-monitor", "error-tracker", "grafana", "log-analytics", "metrics-monitor"]),
    );
    expect(sources.filter((s) => s === "cloud-monitor")).toHaveLength(2);
    // The custom source's example: its name is the badge, and its preview records nothing.
    expect(sources.filter((s) => s === "disk-watcher")).toHaveLength(1);
    expect(run.stdout).toMatch(/"matchedRule":"ok".*"would":"recorded"/);
    // Configuration as code: the file just exported, applied back, changes nothing.
    expect(run.stdout).toContain("no changes: the organization matches the file\ndry run: nothing changed\n");
    const heartbeat = await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token });
    expect(heartbeat.body.lastSeenAt).not.toBeNull();
  });

  it("reaches the service over Connect and gRPC with buf curl", () => {
    // buf curl prints the response message as indented JSON.
    expect(run.stdout).toMatch(/"incidents":\s*\[\s*\{/);
    // Listed by name: the heartbeats the moving-in page imports come before nightly-backup.
    expect(run.stdout).toMatch(/"heartbeats":\s*\[\s*\{\s*"name":\s*"[a-z0-9._-]+",[\s\S]*?"name":\s*"nightly-backup"/);
  });
});
