import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import postgres from "postgres";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import type { TestApp } from "../support/app.js";
import { inPage, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";

// Escalation in the console, in Debian's Chromium: the acknowledgement deadlines set on their own
// page (and a wrong list refused with the service's message), and the room of an unacknowledged
// incident showing its next deadline, the step that passed, and nothing once acknowledged. The
// database clock is the test clock: the incident's opening is moved back instead of waiting.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

let app: TestApp;
let sql: postgres.Sql;
let context: BrowserContext;
let page: Page;
let profile: string;
let ingest: string;

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `escalation-${name}.png`), fullPage: true });
}

async function expectAccessible(): Promise<void> {
  if (!(await inPage<boolean>(page, "typeof window.axe === 'object'"))) await page.evaluate(AXE_SOURCE);
  const violations = await inPage<{ id: string }[]>(
    page,
    `axe.run(document, { resultTypes: ["violations"] }).then((r) => r.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => ({ id: v.id })))`,
  );
  expect(violations).toEqual([]);
}

async function expectFitsPhone(): Promise<void> {
  await page.setViewportSize({ width: 390, height: 844 });
  expect(await inPage<number>(page, "document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
  await page.setViewportSize({ width: 1280, height: 800 });
}

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  app = await startConsoleApp({ env: { ESCALATION_SWEEP_SECONDS: "0.5" } });
  sql = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  const owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
  profile = mkdtempSync(join(tmpdir(), "escalation-chromium-"));
  context = await launchChromium(profile);
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
  await signInAsOwner(page, `${app.url}/login`);
}, 240_000);

afterAll(async () => {
  await context?.close();
  await sql?.end();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("escalation in the console", () => {
  it("sets the acknowledgement deadlines per severity, and shows the service's refusal of a wrong list", async () => {
    // The saved deadlines arrive late, as on a slow link: what is typed before is not overwritten.
    await page.route("**/o/acme/escalation", async (route) => {
      if (route.request().method() === "GET") await new Promise((r) => setTimeout(r, 1500));
      await route.continue();
    });
    await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Escalation" }).click();
    await page.getByRole("heading", { name: "Escalation" }).waitFor();
    await page.getByLabel("SEV1: minutes after opening").fill("5, 15, 30");
    await page.getByLabel("SEV2: minutes after opening").fill("30, 15");
    await page.getByRole("button", { name: "Save deadlines" }).click();
    await page.getByText("sev2 step 2: 15 minutes is not after step 1 (30); list the minutes in ascending order").waitFor();
    expect((await app.call("GET", "/o/acme/escalation", { token: await app.ownerToken() })).body.severities).toEqual([]);

    await page.getByLabel("SEV2: minutes after opening").fill("15 60");
    await page.getByRole("button", { name: "Save deadlines" }).click();
    await page.getByRole("status").getByText("Saved.").waitFor();
    expect((await app.call("GET", "/o/acme/escalation", { token: await app.ownerToken() })).body.severities).toEqual([
      { severity: "sev1", minutes: [5, 15, 30] },
      { severity: "sev2", minutes: [15, 60] },
    ]);
    await page.unrouteAll({ behavior: "wait" });
    // Read back after a reload.
    await page.reload();
    await expect.poll(() => page.getByLabel("SEV1: minutes after opening").inputValue()).toBe("5, 15, 30");
    await expectAccessible();
    await expectFitsPhone();
    await shot("settings");
  });

  it("shows the next deadline in the room, the step that passed, and nothing once acknowledged", async () => {
    const res = await app.call("POST", "/triggers", {
      token: ingest,
      body: { title: "Payments API down", alert_type: "error", priority: "P1", alert_id: "esc-1", event_id: "esc-1" },
    });
    expect(res.status).toBe(201);
    const id = res.body.incidentId as string;
    await sql`update incidents.incidents set severity = 'sev1' where id = ${id}`;
    await page.goto(`${app.url}/o/acme/incidents/${id}`);
    const next = page.locator(".next-escalation");
    await expect.poll(() => next.textContent()).toMatch(/Next escalationStep 1 of 3 \(5 min\) in [45] min unless acknowledged/);

    // Five minutes later by the database clock: step 1 passes, live, and step 2 is next.
    await sql`update incidents.incidents set opened_at = now() - interval '5 minutes 1 second' where id = ${id}`;
    await page.getByText("Not acknowledged 5 minutes after opening (step 1 of 3)").waitFor();
    await expect.poll(() => next.textContent()).toMatch(/Step 2 of 3 \(15 min\) in (9|10) min/);
    await expectAccessible();
    await expectFitsPhone();
    await shot("room");

    await page.getByRole("button", { name: "Acknowledge" }).click();
    await next.waitFor({ state: "detached" });
  });
});
