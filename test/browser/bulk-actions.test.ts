import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { OWNER, type TestApp } from "../support/app.js";
import { inPage, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";

// Bulk actions in Debian's Chromium against the whole service on loopback: tick rows, act on them
// after one confirmation that says how many, read the per-incident results; the one-click
// "Resolve all recovered at source"; "Select all incidents matching this filter" over more incidents
// than one page; and the severity sort's tie-break in the list. The bar's screenshots are written
// to docs/console-bulk.png and docs/console-bulk-all-matching.png for the how-to page.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");
const DOCS = resolve(import.meta.dirname, "../../docs");
/** Incidents of the storm "select all matching" resolves: more than one page of the list. */
const STORM = 105;

let app: TestApp;
let context: BrowserContext;
let page: Page;
let profile: string;
let owner: string;
let ingest: string;
const ids: Record<string, string> = {};

async function trigger(body: Record<string, unknown>) {
  const res = await app.call("POST", "/triggers", { token: ingest, body });
  expect(res.status).toBeLessThan(300);
  return res.body;
}
async function incident(name: string) {
  return (await app.call("GET", `/o/acme/incidents/${ids[name]}`, { token: owner })).body;
}
const row = (name: string) => page.locator(`tr[data-incident-id="${ids[name]}"]`);
const visibleIds = () => inPage<string[]>(page, `[...document.querySelectorAll("tbody tr")].map((tr) => tr.dataset.incidentId)`);

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  app = await startConsoleApp();
  owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
  const added = await app.call("POST", "/o/acme/members", {
    token: owner,
    body: { email: "responder@acme.test", password: "responder password", role: "member" },
  });
  expect(added.status).toBe(201);

  // Two SEV1 incidents: "busy" opened first and repeated twice, "quiet" opened later.
  ids.busy = (await trigger({ title: "Checkout errors", alert_type: "error", alert_id: "busy", event_id: "busy-1", priority: "P1" })).incidentId;
  ids.quiet = (await trigger({ title: "Payments latency", alert_type: "error", alert_id: "quiet", event_id: "quiet-1", priority: "P1" })).incidentId;
  for (const n of [2, 3]) await trigger({ title: "Checkout errors", alert_type: "error", alert_id: "busy", event_id: `busy-${n}`, priority: "P1" });
  // Two that recovered at source, and one still firing.
  for (const name of ["disk", "queue"]) {
    ids[name] = (await trigger({ title: `${name} warning`, alert_type: "warning", alert_id: name, event_id: `${name}-1` })).incidentId;
    await trigger({ title: `${name} warning`, alert_type: "success", alert_transition: "Recovered", alert_id: name, event_id: `${name}-2` });
  }
  ids.firing = (await trigger({ title: "Cache misses", alert_type: "warning", alert_id: "firing", event_id: "firing-1" })).incidentId;

  profile = mkdtempSync(join(tmpdir(), "bulk-chromium-"));
  context = await launchChromium(profile, { viewport: { width: 1280, height: 800 } });
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
}, 240_000);

afterAll(async () => {
  await context?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("bulk actions in the console", () => {
  it("sorts by severity with the most repeated first among equals", async () => {
    await signInAsOwner(page, `${app.url}/`);
    await page.getByLabel("Sort").selectOption("severity");
    await expect.poll(async () => (await visibleIds()).slice(0, 2)).toEqual([ids.busy, ids.quiet]);
  });

  it("acknowledges the ticked rows after one confirmation that says how many", async () => {
    await row("busy").getByRole("checkbox").check();
    await row("firing").getByRole("checkbox").check();
    const bar = page.getByRole("region", { name: "Bulk actions" });
    await bar.getByText("2 incidents selected").waitFor();
    await bar.getByRole("button", { name: "Acknowledge", exact: true }).click();
    await bar.getByText("Acknowledge 2 incidents?").waitFor();
    await bar.getByRole("button", { name: "Acknowledge 2 incidents" }).click();
    await bar.getByText("2 done, 0 already so, 0 refused, 0 not found.").waitFor();
    for (const name of ["busy", "firing"]) {
      const read = await incident(name);
      expect(read.acknowledgedBy).toBe(OWNER.email);
      expect(read.timeline.filter((e: { kind: string }) => e.kind === "acknowledged")).toHaveLength(1);
    }
    expect((await incident("quiet")).acknowledgedBy).toBeNull();
  });

  it("assigns every incident shown to one owner, and shows the results", async () => {
    await page.getByRole("checkbox", { name: "Select every incident shown" }).check();
    const bar = page.getByRole("region", { name: "Bulk actions" });
    await bar.getByText("5 incidents selected").waitFor();
    await bar.getByLabel("Owner to assign").selectOption({ label: "responder@acme.test" });
    await bar.getByRole("button", { name: "Assign", exact: true }).click();
    await bar.getByText("Assign 5 incidents to responder@acme.test?").waitFor();
    await page.screenshot({ path: join(DOCS, "console-bulk.png") });
    await bar.getByRole("button", { name: "Assign 5 incidents" }).click();
    await bar.getByText("5 done, 0 already so, 0 refused, 0 not found.").waitFor();
    for (const name of ["busy", "quiet", "disk", "queue", "firing"]) expect((await incident(name)).ownerEmail).toBe("responder@acme.test");
  });

  it("resolves every incident recovered at source in one click and one confirmation", async () => {
    await page.getByLabel("Sort").selectOption("newest");
    await page.getByRole("button", { name: "Resolve all recovered at source" }).click();
    const bar = page.getByRole("region", { name: "Bulk actions" });
    await bar.getByText("Resolve 2 incidents?").waitFor();
    await bar.getByRole("button", { name: "Resolve 2 incidents" }).click();
    await bar.getByText("2 done, 0 already so, 0 refused, 0 not found.").waitFor();
    await page.screenshot({ path: join(ARTIFACTS, "bulk-resolved.png"), fullPage: true });
    for (const name of ["disk", "queue"]) {
      const read = await incident(name);
      expect(read.state).toBe("resolved");
      expect(read.timeline.filter((e: { kind: string }) => e.kind === "resolved")).toEqual([
        expect.objectContaining({ summary: `Resolved by ${OWNER.email}` }),
      ]);
    }
    for (const name of ["busy", "quiet", "firing"]) expect((await incident(name)).state).toBe("open");
    await expect.poll(async () => (await visibleIds()).sort()).toEqual([ids.busy, ids.quiet, ids.firing].sort());
  });

  it("selects every incident matching a filter, past the first page, and resolves them all with one confirmation", async () => {
    // More incidents than one page of the list (100) match "Storm"; the three still open above do not.
    const storm: string[] = [];
    for (let n = 0; n < STORM; n++) {
      storm.push((await trigger({ title: `Storm host-${n}`, alert_type: "error", alert_id: `storm-${n}`, event_id: `storm-${n}-1` })).incidentId);
    }
    await page.goto(`${app.url}/incidents?state=open&q=Storm`);
    await expect.poll(async () => (await visibleIds()).length).toBe(100);
    await page.getByRole("checkbox", { name: "Select every incident shown" }).check();
    const bar = page.getByRole("region", { name: "Bulk actions" });
    await bar.getByText("100 incidents selected").waitFor();
    await page.getByRole("button", { name: "Select all incidents matching this filter" }).click();
    await bar.getByText("Every incident matching this filter selected").waitFor();
    await bar.getByRole("button", { name: "Resolve", exact: true }).click();
    await bar.getByText(`Resolve ${STORM} incidents?`).waitFor();
    await page.screenshot({ path: join(DOCS, "console-bulk-all-matching.png") });
    await bar.getByRole("button", { name: `Resolve ${STORM} incidents` }).click();
    await bar.getByText(`${STORM} done, 0 already so, 0 refused, 0 not found.`).waitFor({ timeout: 60_000 });

    for (const id of storm) {
      const read = (await app.call("GET", `/o/acme/incidents/${id}`, { token: owner })).body;
      expect(read.state, id).toBe("resolved");
      expect(read.timeline.filter((e: { kind: string }) => e.kind === "resolved")).toHaveLength(1);
    }
    const stillOpen = await app.call("GET", "/o/acme/incidents?state=open&limit=500", { token: owner });
    expect(stillOpen.body.incidents.map((i: { id: string }) => i.id).sort()).toEqual([ids.busy, ids.quiet, ids.firing].sort());
    await expect.poll(async () => (await visibleIds()).length).toBe(0);
  }, 180_000);
});
