import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { FIVE_SOURCES, sendAs } from "../e2e/correlation-kit.js";
import { inPage, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";
import type { TestApp } from "../support/app.js";

// Correlation in the console, in Debian's Chromium: five tools report one service, linked into
// one group; the incident list shows the group as one row with its count and expands it, and
// an incident's room lists the related incidents. Screens are saved under test/artifacts/.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");

let app: TestApp;
let context: BrowserContext;
let page: Page;
let profile: string;
let unrelated: string;

const visibleIds = () => inPage<string[]>(page, `[...document.querySelectorAll("tbody tr")].map((tr) => tr.dataset.incidentId)`);

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  app = await startConsoleApp();
  const owner = await app.ownerToken();
  const issue = async (path: string) => (await app.call("POST", `/o/acme/triggers/${path}`, { token: owner })).body;
  const creds = { owner, ingestToken: (await issue("ingest-token")).token, alertRouterSecret: (await issue("alertrouter-secret")).secret, chatSecret: "" };
  expect((await app.call("PUT", "/o/acme/correlation", { token: owner, body: { mode: "link" } })).status).toBe(200);
  // The error tracker's every event opens its own incident: one of it is enough here.
  for (const source of FIVE_SOURCES) expect((await sendAs(app.url, creds, source, "checkout-api", "browser", 1)).status).toBeLessThan(300);
  unrelated = (await sendAs(app.url, creds, "metrics-monitor", "payments", "browser-other", 1)).body.incidentId;

  profile = mkdtempSync(join(tmpdir(), "correlation-chromium-"));
  context = await launchChromium(profile, {});
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
}, 240_000);

afterAll(async () => {
  await context?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("correlation in the console", () => {
  it("shows one problem seen by five tools as one row with its count, and expands it", async () => {
    await signInAsOwner(page, `${app.url}/`);

    // Folded: the group's newest incident and the unrelated one.
    await expect.poll(async () => (await visibleIds()).length).toBe(2);
    expect(await visibleIds()).toContain(unrelated);
    const toggle = page.locator("button.group-toggle");
    expect(await toggle.textContent()).toMatch(/^5 related incidents/);
    expect(await toggle.getAttribute("aria-expanded")).toBe("false");
    await page.screenshot({ path: join(ARTIFACTS, "correlation-folded.png"), fullPage: true });

    await toggle.click();
    await expect.poll(async () => (await visibleIds()).length).toBe(6);
    expect(await toggle.getAttribute("aria-expanded")).toBe("true");
    expect(await page.locator("span.badge.correlated").count()).toBe(4);
    await page.screenshot({ path: join(ARTIFACTS, "correlation-expanded.png"), fullPage: true });

    await toggle.click();
    await expect.poll(async () => (await visibleIds()).length).toBe(2);
  });

  it("lists the related incidents on an incident's page, each a link to its room", async () => {
    const lead = (await visibleIds()).find((id) => id !== unrelated)!;
    await page.goto(`${app.url}/o/acme/incidents/${lead}`);
    await page.getByRole("heading", { name: "Related incidents (4)" }).waitFor();
    const links = page.locator(".related-incidents li");
    expect(await links.count()).toBe(4);
    await links.first().locator("a").click();
    await page.getByRole("heading", { name: "Related incidents (4)" }).waitFor();
    expect(page.url()).not.toContain(lead);
    await page.screenshot({ path: join(ARTIFACTS, "correlation-room.png"), fullPage: true });
  });
});
