import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { BrowserContext, Page } from "playwright-core";
import { expectLabelled, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import type { TestApp } from "../support/app.js";

// The console's heartbeat pages in Debian's Chromium against the whole service on loopback:
// registering and editing every setting, each kept ping with its body, the link to a heartbeat's
// open incident with its silent time counting live, and setup snippets whose commands are run
// here with sh against the running service. Each screen is saved under test/artifacts/.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");
const JOB_PLACEHOLDER = "/usr/local/bin/your-job";
const run = promisify(execFile);

let app: TestApp;
let context: BrowserContext;
let page: Page;
let profile: string;
let owner: string;

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `heartbeats-${name}.png`), fullPage: true, timeout: 30_000 });
}

async function heartbeatsPage(): Promise<void> {
  await page.goto(`${app.url}/heartbeats`);
  await page.getByRole("heading", { name: "Heartbeats" }).waitFor();
}

async function registerByApi(body: Record<string, unknown>): Promise<{ pingUrl: string }> {
  const res = await app.call("POST", "/o/acme/heartbeats", { token: owner, body });
  expect(res.status).toBe(201);
  return res.body;
}

interface Ping {
  kind: string;
  exitStatus: number | null;
  runId: string | null;
  body: string;
  runSeconds: number | null;
}

async function pingsOf(name: string): Promise<Ping[]> {
  const res = await app.call("GET", `/o/acme/heartbeats/${name}/pings`, { token: owner });
  expect(res.status).toBe(200);
  return res.body.pings;
}

/** Runs a command as /bin/sh would from a crontab line or a container's `sh -c`. */
async function sh(command: string, env: Record<string, string> = {}): Promise<number> {
  try {
    await run("/bin/sh", ["-c", command], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, timeout: 60_000 });
    return 0;
  } catch (err) {
    const code = (err as { code?: number | string }).code;
    if (typeof code === "number") return code;
    throw err;
  }
}

/** The snippet's text as the console shows it, after opening the heartbeat's setups. */
async function snippet(name: string, kind: string): Promise<string> {
  return page.locator(`#snippet-${kind}-${name}`).inputValue();
}

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  app = await startConsoleApp({ env: { HEARTBEAT_SWEEP_SECONDS: "1" } });
  owner = await app.ownerToken();
  profile = mkdtempSync(join(tmpdir(), "console-chromium-"));
  context = await launchChromium(profile, {
    viewport: { width: 1280, height: 900 },
  });
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
  page.on("dialog", (dialog) => void dialog.accept());
  await signInAsOwner(page, `${app.url}/login`);
}, 240_000);

afterAll(async () => {
  await context?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("console heartbeats", () => {
  it("registers a heartbeat on a cron schedule with its time zone, grace, run limits and misses, then edits every one", async () => {
    await heartbeatsPage();
    await page.getByLabel("Name").fill("nightly-backup");
    await page.getByLabel("On a cron schedule").check();
    await page.getByLabel("Schedule", { exact: true }).fill("30 2 * * *");
    await page.getByLabel("Time zone").fill("Europe/Berlin");
    await page.getByLabel("Grace").fill("600");
    await page.getByLabel("Shortest run").fill("30");
    await page.getByLabel("Longest run").fill("3600");
    await page.getByLabel("Alert after missed pings").fill("2");
    await page.getByRole("button", { name: "Register" }).click();
    const row = page.locator('tr[data-heartbeat="nightly-backup"]');
    await row.waitFor();
    const registered = await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: owner });
    expect(registered.body).toMatchObject({
      schedule: "30 2 * * *",
      timezone: "Europe/Berlin",
      graceSeconds: 600,
      minRunSeconds: 30,
      maxRunSeconds: 3600,
      alertAfterMisses: 2,
      expectedIntervalSeconds: 0,
    });
    await expect
      .poll(() => row.locator('td[data-label="Interval + grace"]').textContent())
      .toBe("30 2 * * * (Europe/Berlin) + 10 min, alert after 2 missed; runs 30 s to 1 h");
    // The setups shown after registering are the heartbeat's own: its schedule, zone and ping URL.
    const crontab = await snippet("nightly-backup", "crontab");
    expect(crontab.startsWith(`30 2 * * * RID=`)).toBe(true);
    expect(crontab).toContain(registered.body.pingUrl);
    expect(crontab).not.toContain("\n");
    expect(await page.getByText("put CRON_TZ=Europe/Berlin on a line above it").count()).toBe(1);
    await expectLabelled(page);
    await shot("register");

    await row.getByRole("button", { name: "Edit nightly-backup" }).click();
    const form = page.getByRole("form", { name: "Edit nightly-backup" });
    expect(await form.getByLabel("Schedule", { exact: true }).inputValue()).toBe("30 2 * * *");
    expect(await form.getByLabel("Time zone").inputValue()).toBe("Europe/Berlin");
    await form.getByLabel("Time zone").fill("America/New_York");
    await form.getByLabel("Schedule", { exact: true }).fill("15 3 * * 1-5");
    await form.getByLabel("Shortest run").fill("");
    await form.getByLabel("Longest run").fill("7200");
    await form.getByLabel("Alert after missed pings").fill("3");
    await form.getByLabel("Grace").fill("900");
    await form.getByRole("button", { name: "Save" }).click();
    await expect
      .poll(() => row.locator('td[data-label="Interval + grace"]').textContent())
      .toBe("15 3 * * 1-5 (America/New_York) + 15 min, alert after 3 missed; runs at most 2 h");
    const edited = await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: owner });
    expect(edited.body).toMatchObject({
      schedule: "15 3 * * 1-5",
      timezone: "America/New_York",
      graceSeconds: 900,
      minRunSeconds: null,
      maxRunSeconds: 7200,
      alertAfterMisses: 3,
    });

    // Back to an interval.
    await row.getByRole("button", { name: "Edit nightly-backup" }).click();
    await form.getByLabel("Every interval").check();
    await form.getByLabel("Expected interval").fill("7200");
    await form.getByRole("button", { name: "Save" }).click();
    await expect.poll(() => row.locator('td[data-label="Interval + grace"]').textContent()).toBe("2 h + 15 min, alert after 3 missed; runs at most 2 h");
    expect((await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: owner })).body).toMatchObject({
      expectedIntervalSeconds: 7200,
      schedule: null,
      timezone: null,
    });

    // A refused setting says what to do, and changes nothing.
    await row.getByRole("button", { name: "Edit nightly-backup" }).click();
    await form.getByLabel("Shortest run").fill("9000");
    await form.getByRole("button", { name: "Save" }).click();
    await form.getByText("minRunSeconds (9000) must be less than maxRunSeconds (7200)").waitFor();
    await form.getByRole("button", { name: "Cancel" }).click();
    expect((await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: owner })).body.minRunSeconds).toBeNull();
  });

  it("gives one-line crontab, systemd and Kubernetes CronJob setups whose commands ping the running service", async () => {
    const { pingUrl } = await registerByApi({ name: "every-minute", expectedIntervalSeconds: 60, graceSeconds: 30 });
    await heartbeatsPage();
    const row = page.locator('tr[data-heartbeat="every-minute"]');
    await row.getByRole("button", { name: "Setup of every-minute" }).click();
    await page.getByRole("region", { name: "Setups for every-minute" }).waitFor();
    await expectLabelled(page);
    await shot("setup");

    // The plain ping: Healthchecks' own line, the key in the URL.
    const plain = await snippet("every-minute", "ping");
    expect(plain).toBe(`curl -fsS -m 10 --retry 5 -o /dev/null "${pingUrl}"`);
    expect(await sh(plain)).toBe(0);
    expect((await pingsOf("every-minute"))[0]).toMatchObject({ kind: "success" });

    // The crontab line: a 60 s interval runs every minute; the command after the five fields is
    // what cron hands to /bin/sh.
    const crontab = await snippet("every-minute", "crontab");
    expect(crontab.split("\n")).toHaveLength(1);
    const fields = crontab.split(" ");
    expect(fields.slice(0, 5).join(" ")).toBe("* * * * *");
    expect(crontab).not.toContain("%");
    const command = fields.slice(5).join(" ");
    expect(command).toContain(JOB_PLACEHOLDER);
    expect(await sh(command.replace(JOB_PLACEHOLDER, "echo copied 3 files"))).toBe(0);
    let pings = await pingsOf("every-minute");
    expect(pings[0]).toMatchObject({ kind: "success", exitStatus: 0, body: "copied 3 files\n" });
    expect(pings[1]).toMatchObject({ kind: "start" });
    expect(pings[0]!.runId).toBe(pings[1]!.runId);
    expect(pings[0]!.runId).toMatch(/^[0-9a-f-]{36}$/);
    expect(pings[0]!.runSeconds).toBeGreaterThanOrEqual(0);
    // A failing job: its exit status, its output, and the line's own exit status.
    expect(await sh(command.replace(JOB_PLACEHOLDER, "sh -c 'echo disk full >&2; exit 3'"))).toBe(3);
    pings = await pingsOf("every-minute");
    expect(pings[0]).toMatchObject({ kind: "fail", exitStatus: 3, body: "disk full\n" });

    // systemd: `-` before a command lets the unit go on if the ping fails; `$$` is a literal `$`.
    const systemd = (await snippet("every-minute", "systemd")).split("\n");
    expect(systemd).toHaveLength(2);
    const asSystemdRuns = (line: string, directive: string) => {
      expect(line.startsWith(`${directive}=`)).toBe(true);
      return line
        .slice(directive.length + 1)
        .replace(/^-/, "")
        .replaceAll("$$", "$");
    };
    expect(await sh(asSystemdRuns(systemd[0]!, "ExecStartPre"))).toBe(0);
    expect((await pingsOf("every-minute"))[0]).toMatchObject({ kind: "start" });
    const stopPost = asSystemdRuns(systemd[1]!, "ExecStopPost");
    expect(await sh(stopPost, { EXIT_CODE: "exited", EXIT_STATUS: "4", INVOCATION_ID: "0" })).toBe(0);
    expect((await pingsOf("every-minute"))[0]).toMatchObject({ kind: "fail", exitStatus: 4 });
    expect(await sh(stopPost, { EXIT_CODE: "exited", EXIT_STATUS: "0", INVOCATION_ID: "0" })).toBe(0);
    expect((await pingsOf("every-minute"))[0]).toMatchObject({ kind: "success", exitStatus: 0 });
    // Killed by a signal: systemd sets EXIT_CODE=killed and EXIT_STATUS to the signal's name.
    expect(await sh(stopPost, { EXIT_CODE: "killed", EXIT_STATUS: "TERM", INVOCATION_ID: "0" })).toBe(0);
    expect((await pingsOf("every-minute"))[0]).toMatchObject({ kind: "fail", exitStatus: null });

    // Kubernetes: a CronJob on the same schedule whose container runs the same one line.
    const manifest = parseYaml(await snippet("every-minute", "kubernetes"));
    expect(manifest).toMatchObject({ apiVersion: "batch/v1", kind: "CronJob", metadata: { name: "every-minute" }, spec: { schedule: "* * * * *" } });
    const container = manifest.spec.jobTemplate.spec.template.spec.containers[0];
    expect(container.command).toEqual(["/bin/sh", "-c"]);
    expect(container.args).toHaveLength(1);
    expect(await sh(container.args[0].replace(JOB_PLACEHOLDER, "echo k8s run"))).toBe(0);
    pings = await pingsOf("every-minute");
    expect(pings[0]).toMatchObject({ kind: "success", exitStatus: 0, body: "k8s run\n" });
    expect(pings[1]).toMatchObject({ kind: "start", runId: pings[0]!.runId });
  });

  it("generates each setup from the heartbeat's own settings: a schedule and its zone, or an interval cron cannot keep", async () => {
    await registerByApi({ name: "berlin-report", schedule: "0 6 * * 1", timezone: "Europe/Berlin", graceSeconds: 600 });
    await registerByApi({ name: "odd-interval", expectedIntervalSeconds: 90, graceSeconds: 30 });
    await registerByApi({ name: "six-hourly", expectedIntervalSeconds: 21_600, graceSeconds: 600 });
    await heartbeatsPage();
    await page.locator('tr[data-heartbeat="berlin-report"]').getByRole("button", { name: "Setup of berlin-report" }).click();
    expect((await snippet("berlin-report", "crontab")).startsWith("0 6 * * 1 ")).toBe(true);
    const manifest = parseYaml(await snippet("berlin-report", "kubernetes"));
    expect(manifest.spec).toMatchObject({ schedule: "0 6 * * 1", timeZone: "Europe/Berlin" });
    await page.locator('tr[data-heartbeat="six-hourly"]').getByRole("button", { name: "Setup of six-hourly" }).click();
    expect((await snippet("six-hourly", "crontab")).startsWith("0 */6 * * * ")).toBe(true);
    await page.locator('tr[data-heartbeat="odd-interval"]').getByRole("button", { name: "Setup of odd-interval" }).click();
    const region = page.getByRole("region", { name: "Setups for odd-interval" });
    await region.getByText("Every 90 s has no crontab schedule").waitFor();
    expect(await region.locator("#snippet-crontab-odd-interval").count()).toBe(0);
    expect(await region.locator("#snippet-kubernetes-odd-interval").count()).toBe(0);
    expect(await region.locator("#snippet-systemd-odd-interval").count()).toBe(1);
  });

  it("reads every kept ping with its body", async () => {
    const { pingUrl } = await registerByApi({ name: "said-a-lot", expectedIntervalSeconds: 3600, graceSeconds: 60 });
    const post = (path: string, body: string) => fetch(`${pingUrl}${path}`, { method: "POST", body });
    expect((await post("/start", "")).status).toBe(200);
    expect((await post("/0", "dumped 12 tables")).status).toBe(200);
    expect((await post("/log", "half way: 6 of 12")).status).toBe(200);
    expect((await post("/1", `pg_dump: error: connection refused\n${"x".repeat(11_000)}`)).status).toBe(200);
    await heartbeatsPage();
    const row = page.locator('tr[data-heartbeat="said-a-lot"]');
    await row.getByRole("button", { name: "History of said-a-lot" }).click();
    const history = page.getByRole("region", { name: "Runs and signals of said-a-lot" });
    await history.locator("tr[data-ping-kind]").first().waitFor();
    const rows = history.locator("tr[data-ping-kind]");
    expect(await rows.evaluateAll((all) => all.map((r) => r.getAttribute("data-ping-kind")))).toEqual(["fail", "log", "success", "start"]);
    // Each body opens from its row, the one kept before it as well as the last.
    const bodyOf = async (n: number) => {
      const cell = rows.nth(n).locator('td[data-label="Body"]');
      await cell.locator("summary").click();
      return cell.locator("pre").textContent();
    };
    expect(await bodyOf(2)).toBe("dumped 12 tables");
    expect(await bodyOf(1)).toBe("half way: 6 of 12");
    const cut = await bodyOf(0);
    expect(cut!.startsWith("pg_dump: error: connection refused\n")).toBe(true);
    expect(cut).toHaveLength(10_240);
    expect(await rows.nth(0).locator("summary").textContent()).toBe("11035 B (first 10 KiB kept)");
    expect(await rows.nth(3).locator('td[data-label="Body"]').textContent()).toBe("—");
    await expectLabelled(page);
    await shot("history");
  });

  it("links a silent heartbeat to its open incident and counts its silent time live", async () => {
    await registerByApi({ name: "gone-quiet", expectedIntervalSeconds: 1, graceSeconds: 1 });
    const incidentId = await (async () => {
      for (let i = 0; i < 200; i++) {
        const res = await app.call("GET", "/o/acme/heartbeats/gone-quiet", { token: owner });
        if (res.body.openIncidentId) return res.body.openIncidentId as string;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error("no incident opened for gone-quiet");
    })();
    await heartbeatsPage();
    const status = page.locator('tr[data-heartbeat="gone-quiet"] td[data-label="Status"]');
    await expect.poll(() => status.locator(".badge").textContent()).toBe("silent");
    const secondsSilent = async () => Number((/for (\d+) s/.exec((await status.locator(".silent-for").textContent()) ?? "") ?? [])[1]);
    const first = await secondsSilent();
    expect(first).toBeGreaterThanOrEqual(2);
    // Live: the count grows without a reload.
    await expect.poll(secondsSilent, { timeout: BROWSER_WAIT_MS }).toBeGreaterThan(first);
    await expectLabelled(page);
    await shot("silent");
    await status.getByRole("link", { name: "Open incident of gone-quiet" }).click();
    await page.waitForURL(`**/o/acme/incidents/${incidentId}`);
    await page.getByRole("heading", { name: "Heartbeat gone-quiet went silent" }).waitFor();
  });
});
