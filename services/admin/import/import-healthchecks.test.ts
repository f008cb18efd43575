import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { castOf, type Cast } from "../../heartbeats/testing/kit.js";
import { admin } from "./testing/admin-command.js";

// `npm run admin -- import-healthchecks`: the command as a person runs it, against a running
// service over HTTP, with a Healthchecks export in the shape its Management API answers.

let app: TestApp;
let cast: Cast;
let dir: string;

// As GET /api/v3/checks/ answers (trimmed of fields the import does not read).
const EXPORT = {
  checks: [
    {
      name: "Nightly Backup",
      slug: "nightly-backup",
      tags: "prod db",
      grace: 3600,
      n_pings: 120,
      status: "up",
      uuid: "5f8a8a0e-2a2b-4f3c-9d7e-0b1c2d3e4f50",
      ping_url: "https://hc-ping.com/5f8a8a0e-2a2b-4f3c-9d7e-0b1c2d3e4f50",
      schedule: "30 2 * * *",
      tz: "Europe/Berlin",
    },
    {
      name: "Queue Worker (EU)",
      slug: "",
      grace: 60,
      status: "up",
      ping_url: "https://hc-ping.com/0c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5",
      timeout: 300,
    },
    {
      name: "Weekly Report",
      slug: "weekly-report",
      grace: 3600,
      status: "paused",
      ping_url: "https://hc-ping.com/2c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5",
      timeout: 604800,
    },
    { name: "Odd", slug: "odd", grace: 60, ping_url: "https://hc-ping.com/1c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5" },
  ],
};

beforeAll(async () => {
  app = await startApp({ env: { HEARTBEAT_SWEEP_SECONDS: "3600" } });
  cast = await castOf(app);
  dir = mkdtempSync(join(tmpdir(), "hc-export-"));
  writeFileSync(join(dir, "checks.json"), JSON.stringify(EXPORT));
});

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await app?.stop();
});

describe("import-healthchecks", () => {
  it("--dry-run says what it would register and registers nothing", async () => {
    const result = await admin(["import-healthchecks", join(dir, "checks.json"), "--org", "acme", "--url", app.url, "--dry-run"]);
    expect(result.code).toBe(0);
    expect(result.stdout.trim().split("\n")).toEqual([
      `would register nightly-backup (schedule "30 2 * * *" (Europe/Berlin), grace 3600s)\thttps://hc-ping.com/5f8a8a0e-2a2b-4f3c-9d7e-0b1c2d3e4f50`,
      "would register queue-worker-eu (every 300s, grace 60s)\thttps://hc-ping.com/0c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5",
      "would register weekly-report (every 604800s, grace 3600s, paused)\thttps://hc-ping.com/2c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5",
    ]);
    expect(result.stderr).toContain('skipped "Odd": neither a timeout nor a schedule');
    expect((await app.call("GET", "/o/acme/heartbeats", { token: cast.member })).body.heartbeats).toEqual([]);
  });

  it("registers each check and prints its new ping URL beside the old one; a second run changes nothing", async () => {
    const result = await admin(["import-healthchecks", join(dir, "checks.json"), "--org", "acme", "--url", app.url], cast.admin);
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout
      .trim()
      .split("\n")
      .map((l) => l.split("\t"));
    expect(lines.map((l) => l.slice(0, 2))).toEqual([
      ["nightly-backup", "https://hc-ping.com/5f8a8a0e-2a2b-4f3c-9d7e-0b1c2d3e4f50"],
      ["queue-worker-eu", "https://hc-ping.com/0c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5"],
      ["weekly-report", "https://hc-ping.com/2c1d2e3f-4a5b-4c6d-8e9f-a0b1c2d3e4f5"],
    ]);
    // A check paused there is paused here: it keeps its state, and does not alert.
    expect(lines[2]![3]).toBe("(paused, as it was)");
    expect((await app.call("GET", "/o/acme/heartbeats/weekly-report", { token: cast.member })).body).toMatchObject({ status: "paused" });
    const backup = (await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: cast.member })).body;
    expect(backup).toMatchObject({ schedule: "30 2 * * *", timezone: "Europe/Berlin", graceSeconds: 3600, expectedIntervalSeconds: 0 });
    expect(lines[0]![2]).toBe(backup.pingUrl);
    const worker = (await app.call("GET", "/o/acme/heartbeats/queue-worker-eu", { token: cast.member })).body;
    expect(worker).toMatchObject({ expectedIntervalSeconds: 300, graceSeconds: 60 });
    expect(lines[1]![2]).toBe(worker.pingUrl);
    // The crontab line only changes its URL.
    const ping = await fetch(lines[1]![2]!);
    expect(await ping.text()).toBe("OK");

    const again = await admin(["import-healthchecks", join(dir, "checks.json"), "--org", "acme", "--url", app.url], cast.admin);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(
      `nightly-backup\thttps://hc-ping.com/5f8a8a0e-2a2b-4f3c-9d7e-0b1c2d3e4f50\t${backup.pingUrl}\t(exists already, left as it is)`,
    );
    expect((await app.call("GET", "/o/acme/heartbeats", { token: cast.member })).body.heartbeats).toHaveLength(3);
  });

  it("refuses without an admin's token, and says why for a file that is not an export", async () => {
    const member = await admin(["import-healthchecks", join(dir, "checks.json"), "--org", "acme", "--url", app.url], cast.member);
    expect(member.code).toBe(1);
    expect(member.stderr).toContain("the token in WARROOM_TOKEN may not change acme (403");
    expect((await admin(["import-healthchecks", join(dir, "checks.json"), "--org", "acme", "--url", app.url])).stderr).toContain("WARROOM_TOKEN is not set");
    writeFileSync(join(dir, "wrong.json"), JSON.stringify({ alerts: [] }));
    const wrong = await admin(["import-healthchecks", join(dir, "wrong.json"), "--org", "acme", "--url", app.url], cast.admin);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain("not a Healthchecks export of checks");
    const down = await admin(["import-healthchecks", join(dir, "checks.json"), "--org", "acme", "--url", "http://127.0.0.1:9"], cast.admin);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain("cannot reach the service at http://127.0.0.1:9");
  });
});
