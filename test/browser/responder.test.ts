import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { expectAccessible as expectPageAccessible, inPage, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { createConsoleHttp } from "../../services/console/console-http.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { startApp, type TestApp } from "../support/app.js";

// The console for a responder, in Debian's Chromium: notifications for new incidents (permission
// granted in the test profile), the count of open incidents in the tab's title, the banner when
// the service stops and the fresh read when it is back, issued secrets that stay until dismissed,
// remote sources edited and deleted, the audit log's filters and pages, and the in-app dialogs
// by keyboard. Every page is checked with axe-core (no serious or critical violation) and at a
// phone's width.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");
const ENV = { REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.0/8,10.1.2.0/24", REMOTE_SOURCE_HTTP_BEARER_HOSTS: "10.1.2.3,10.1.2.4,169.254.169.254" };

let app: TestApp;
let restarted: TestApp | undefined;
let context: BrowserContext;
let page: Page;
let profile: string;
let owner: string;
let ingest: string;
const nativeDialogs: string[] = [];

function nav(name: string) {
  return page.getByRole("navigation", { name: "Main" }).getByRole("link", { name });
}

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `responder-${name}.png`), fullPage: true });
}

/** axe-core's serious and critical violations on the page as it is now. */
function expectAccessible(): Promise<void> {
  return expectPageAccessible(page);
}

/** Nothing wider than a phone's screen: no sideways scrolling. */
async function expectFitsPhone(): Promise<void> {
  await page.setViewportSize({ width: 390, height: 844 });
  expect(await inPage<number>(page, "document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
  await page.setViewportSize({ width: 1280, height: 800 });
}

async function trigger(body: Record<string, unknown>) {
  const res = await app.call("POST", "/triggers", { token: ingest, body });
  expect(res.status).toBe(201);
  return res.body.incidentId as string;
}

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  app = await startConsoleApp({ env: ENV });
  owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
  profile = mkdtempSync(join(tmpdir(), "responder-chromium-"));
  context = await launchChromium(profile, {
    // The profile grants notifications to the service's origin, as a person would at the prompt.
    permissions: ["notifications"],
  });
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  // Records each notification the page shows (and still shows it).
  await context.addInitScript(`(() => {
    const Real = window.Notification;
    window.shownNotifications = [];
    class Recorded extends Real {
      constructor(title, options) {
        super(title, options);
        window.shownNotifications.push({ title, body: options && options.body });
      }
    }
    window.Notification = Recorded;
  })()`);
  page = context.pages()[0] ?? (await context.newPage());
  page.on("dialog", (dialog) => {
    nativeDialogs.push(dialog.message());
    void dialog.dismiss();
  });
  await signInAsOwner(page, `${app.url}/login`);
  await page.getByText("Live", { exact: true }).waitFor();
}, 240_000);

afterAll(async () => {
  await context?.close();
  await restarted?.stop();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("the console for a responder", () => {
  it("turns on notifications for SEV2 and above: one for a SEV1, none for a SEV4; the title counts open incidents", async () => {
    expect(await inPage(page, "Notification.permission")).toBe("granted");
    await page.getByRole("button", { name: "Notifications: off" }).click();
    const dialog = page.getByRole("dialog", { name: "Browser notifications" });
    await dialog.getByLabel("Notify me of new incidents while this console is open").check();
    await dialog.getByLabel("At or above").selectOption("sev2");
    await expectAccessible();
    await dialog.getByRole("button", { name: "Save" }).click();
    await dialog.waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Notifications: SEV2 and above" }).waitFor();
    expect(JSON.parse(await inPage<string>(page, `localStorage.getItem("warroom.notifications")`))).toEqual({ enabled: true, minSeverity: "sev2" });

    await trigger({ title: "Checkout down", alert_type: "error", priority: "P1", alert_id: "n-1", event_id: "n-1" });
    await expect
      .poll(() => inPage<{ title: string; body: string }[]>(page, "window.shownNotifications"))
      .toEqual([{ title: "SEV1 New incident", body: "Checkout down (metrics-monitor)" }]);
    await trigger({ title: "Slow report", alert_type: "error", priority: "P4", alert_id: "n-2", event_id: "n-2" });
    await page.getByRole("link", { name: "Slow report" }).waitFor();
    expect(await inPage<unknown[]>(page, "window.shownNotifications")).toHaveLength(1);
    // Two open incidents, neither acknowledged.
    await expect.poll(() => page.title()).toBe("(2) Incidents · warroom");
    // The setting survives a reload (kept in this browser).
    await page.reload();
    await page.getByRole("button", { name: "Notifications: SEV2 and above" }).waitFor();
    await expect.poll(() => page.title()).toBe("(2) Incidents · warroom");
  });

  it("keeps every issued secret on screen until dismissed; the dialog answers Esc, Enter and keeps Tab inside", async () => {
    await nav("Integrations").click();
    await page.getByRole("button", { name: "Issue ingest token" }).click();
    const dialog = page.getByRole("dialog", { name: "Issue a new ingest token?" });
    await dialog.waitFor();
    // Focus starts on the confirming button; Tab and Shift+Tab stay inside the dialog.
    await expect.poll(() => inPage(page, "document.activeElement.textContent")).toBe("Issue");
    await page.keyboard.press("Tab");
    expect(await inPage(page, "document.activeElement.closest('dialog') !== null")).toBe(true);
    await page.keyboard.press("Tab");
    expect(await inPage(page, "document.activeElement.closest('dialog') !== null")).toBe(true);
    await page.keyboard.press("Shift+Tab");
    expect(await inPage(page, "document.activeElement.closest('dialog') !== null")).toBe(true);
    await expectAccessible();
    await shot("dialog");
    // Esc cancels: nothing is issued, focus returns to the button.
    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "detached" });
    expect(await page.locator("[data-issued]").count()).toBe(0);
    // Focus goes back once the dialog has closed, which may be a frame after it left the page.
    await expect.poll(() => inPage(page, "document.activeElement.textContent")).toBe("Issue ingest token");

    // Enter confirms.
    await page.keyboard.press("Enter");
    await dialog.waitFor();
    await page.keyboard.press("Enter");
    await dialog.waitFor({ state: "detached" });
    const token = await page.getByLabel("Ingest token", { exact: true }).inputValue();
    expect(token).toMatch(/^[0-9a-f]{64}$/);
    ingest = token;

    for (const [button, label] of [
      ["Issue alert-router secret", "Alert-router secret"],
      ["Issue chat secret", "Chat secret"],
    ] as const) {
      await page.getByRole("button", { name: button }).click();
      await page.getByRole("dialog").getByRole("button", { name: "Issue", exact: true }).click();
      await page.getByLabel(label, { exact: true }).waitFor();
    }
    // All three stay, each with its copy button.
    expect(await page.getByLabel("Ingest token", { exact: true }).inputValue()).toBe(token);
    expect(await page.locator("[data-issued]").count()).toBe(3);
    expect(await page.locator("[data-issued]").getByRole("button", { name: "Copy", exact: true }).count()).toBe(3);
    const secret = await page.getByLabel("Alert-router secret", { exact: true }).inputValue();
    expect(await page.getByLabel("Alertmanager (any version, 0.25 included): receiver with authorization").inputValue()).toContain(`credentials: "${secret}"`);
    expect(await page.getByLabel("Alertmanager (0.28.0 or later): receiver with http_headers").inputValue()).toContain(`- ${secret}`);
    await expectAccessible();
    await expectFitsPhone();
    await shot("secrets");

    // Moving to another page and back keeps them; Dismiss removes one.
    await nav("Heartbeats").click();
    await nav("Integrations").click();
    expect(await page.locator("[data-issued]").count()).toBe(3);
    await page.getByRole("button", { name: "Dismiss the chat secret" }).click();
    expect(await page.locator("[data-issued]").count()).toBe(2);
    expect(await page.getByLabel("Ingest token", { exact: true }).inputValue()).toBe(token);
  });

  it("edits and deletes a remote source", async () => {
    const created = await app.call("POST", "/o/acme/remote-sources", {
      token: owner,
      body: { name: "metrics-east", baseUrl: "http://10.1.2.3:9400", transport: "http", tenantRef: "east", auth: { bearerToken: "t" } },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await nav("Heartbeats").click();
    await nav("Integrations").click();
    await page.getByText("metrics-east").waitFor();
    await page.getByRole("button", { name: "Edit metrics-east" }).click();
    const form = page.getByRole("form", { name: "Edit metrics-east" });
    await form.getByLabel("Name").fill("metrics-west");
    await form.getByLabel("Base URL").fill("http://10.1.2.4:9400");
    await expectAccessible();
    await form.getByRole("button", { name: "Save changes" }).click();
    await page.getByText("metrics-west").waitFor();
    const read = await app.call("GET", `/o/acme/remote-sources/${created.body.id}`, { token: owner });
    expect(read.body).toMatchObject({ name: "metrics-west", baseUrl: "http://10.1.2.4:9400", tenantRef: "east" });

    // A refused address names the setting that would allow it.
    await page.getByRole("button", { name: "Edit metrics-west" }).click();
    const again = page.getByRole("form", { name: "Edit metrics-west" });
    await again.getByLabel("Base URL").fill("http://169.254.169.254");
    await again.getByRole("button", { name: "Save changes" }).click();
    await expect.poll(() => again.getByRole("alert").textContent()).toContain("to allow it, add its range to REMOTE_SOURCE_ALLOW_CIDRS");
    await again.getByRole("button", { name: "Cancel" }).click();

    await page.getByRole("button", { name: "Delete metrics-west" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Delete", exact: true }).click();
    await expect.poll(() => page.getByText("metrics-west").count()).toBe(0);
    expect((await app.call("GET", `/o/acme/remote-sources/${created.body.id}`, { token: owner })).status).toBe(404);
  });

  it("shows the audit log with a kind filter and pages", async () => {
    // Sixty issues of the chat secret: more than one page of fifty, beside those of earlier tests.
    const kept = (await app.call("GET", "/o/acme/audit-events?kind=trigger.chat_secret.issued&limit=1000", { token: owner })).body.events.length as number;
    for (let i = 0; i < 60; i++) expect((await app.call("POST", "/o/acme/triggers/chat-secret", { token: owner })).status).toBe(200);
    await nav("Audit log").click();
    await page.getByRole("heading", { name: "Audit log" }).waitFor();
    await page.locator("tbody tr").first().waitFor();
    await page.getByLabel("Kind").fill("trigger.chat_secret.issued");
    // The unfiltered first page is fifty of the same issues too, so only the filtered page's answer
    // tells the two apart: wait for it, then for the table it fills.
    const filtered = page.waitForResponse((r) => r.url().includes("/audit-events?") && r.url().includes("kind=trigger.chat_secret.issued"));
    await page.getByRole("button", { name: "Filter" }).click();
    expect((await filtered).status()).toBe(200);
    await expect.poll(() => page.locator('tbody tr[data-kind="trigger.chat_secret.issued"]').count()).toBe(50);
    expect(await page.locator("tbody tr").count()).toBe(50);
    await expectAccessible();
    await expectFitsPhone();
    await shot("audit-log");
    await page.getByRole("button", { name: "Older" }).click();
    await page.getByText("Page 2").waitFor();
    // The rest: the sixty through the API and those issued before.
    const all = await app.call("GET", "/o/acme/audit-events?kind=trigger.chat_secret.issued&limit=1000", { token: owner });
    expect(all.body.events.length).toBe(kept + 60);
    await expect.poll(() => page.locator("tbody tr").count()).toBe(kept + 60 - 50);
    expect(await page.getByRole("button", { name: "Older" }).isDisabled()).toBe(true);
    await page.getByRole("button", { name: "Newer" }).click();
    await expect.poll(() => page.locator("tbody tr").count()).toBe(50);

    await page.getByLabel("Kind").fill("maintenance_window.");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText("No audit events match these filters.").waitFor();
  });

  it("lists an ended maintenance window under past", async () => {
    const now = Date.now();
    const window = await app.call("POST", "/o/acme/maintenance-windows", {
      token: owner,
      body: { startsAt: new Date(now - 60_000).toISOString(), endsAt: new Date(now + 3600_000).toISOString(), reason: "Kernel upgrade" },
    });
    expect(window.status).toBe(201);
    await nav("Maintenance").click();
    const current = page.getByRole("table", { name: "Active and upcoming" });
    await current.locator("tr", { hasText: "Kernel upgrade" }).waitFor();
    await current.getByRole("button", { name: "End now: Kernel upgrade" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "End now", exact: true }).click();
    const past = page.getByRole("table", { name: "Past" });
    await past.locator("tr", { hasText: "Kernel upgrade" }).waitFor();
    await expect.poll(() => current.locator("tr", { hasText: "Kernel upgrade" }).count()).toBe(0);
    await expectAccessible();
    await expectFitsPhone();
  });

  it("shows a full-width banner with the last update's time while the service is stopped, and reads everything again when it is back", async () => {
    await nav("Incidents").click();
    await page.getByText("Live", { exact: true }).waitFor();
    await inPage(page, "window.mainBefore = document.querySelector('main')");
    await app.process.stop();
    const banner = page.getByRole("alert").filter({ hasText: "Connection to the service lost." });
    await banner.waitFor({ timeout: 30_000 });
    expect(await banner.textContent()).toMatch(/Last update .*\((just now|\d+ s ago)\)/);
    const width = await inPage<number>(page, "document.querySelector('.offline-banner').getBoundingClientRect().width");
    expect(width).toBe(await inPage<number>(page, "document.documentElement.clientWidth"));
    await expectAccessible();
    await shot("offline");

    // The same service again, on the same address and database.
    const port = new URL(app.url).port;
    restarted = await startApp({
      databaseUrl: app.databaseUrl,
      env: { ...ENV, PORT: port },
      extraHttp: (config, runtime) => createConsoleHttp(config, runtime),
    });
    await banner.waitFor({ state: "detached", timeout: 60_000 });
    await page.getByText("Live", { exact: true }).waitFor();
    // The page was mounted afresh: every view read again.
    expect(await inPage(page, "document.querySelector('main') !== window.mainBefore")).toBe(true);
    await page.getByRole("link", { name: "Checkout down" }).waitFor();
    expect(nativeDialogs).toEqual([]);
  });
});
