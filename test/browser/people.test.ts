import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { expectLabelled, inPage, launchChromium, BROWSER_WAIT_MS } from "../support/chromium.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { OWNER, type TestApp } from "../support/app.js";

// The console's Members and API keys pages and the room's severity control, in Debian's Chromium
// driven by playwright-core, against the whole service on loopback. Each screen is saved under
// test/artifacts/.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");
const PASSWORD = "password-123";

let app: TestApp;
let context: BrowserContext;
let page: Page;
let profile: string;
let owner: string;

async function shot(target: Page, name: string): Promise<void> {
  await target.screenshot({ path: join(ARTIFACTS, `console-${name}.png`), fullPage: true });
}

const nativeDialogs: string[] = [];

/** Confirms the console's own dialog with its button `label`, and waits for it to close. */
async function confirmIn(target: Page, label: string): Promise<void> {
  const dialog = target.getByRole("dialog");
  await dialog.getByRole("button", { name: label, exact: true }).click();
  await dialog.waitFor({ state: "detached" });
}

/** A tab signed in as `email` (session storage is per tab, so each tab is its own person). */
async function signedIn(email: string, password: string): Promise<Page> {
  const tab = await context.newPage();
  // The console asks in its own dialogs; a native one would be a regression.
  tab.on("dialog", (dialog) => {
    nativeDialogs.push(dialog.message());
    void dialog.dismiss();
  });
  await tab.goto(`${app.url}/login`);
  await tab.getByLabel("Email").fill(email);
  await tab.getByLabel("Password").fill(password);
  await tab.getByLabel("Organization").fill(OWNER.org);
  await tab.getByRole("button", { name: "Sign in" }).click();
  await tab.getByRole("heading", { name: "Incidents" }).waitFor();
  return tab;
}

function nav(target: Page, name: string) {
  return target.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true });
}

async function login(email: string, password: string): Promise<{ status: number; token: string }> {
  const res = await app.call("POST", "/auth/login", { body: { email, password, orgSlug: OWNER.org } });
  return { status: res.status, token: res.body?.accessToken };
}

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  app = await startConsoleApp();
  owner = await app.ownerToken();
  profile = mkdtempSync(join(tmpdir(), "console-chromium-"));
  context = await launchChromium(profile, {});
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = await signedIn(OWNER.email, OWNER.password);
}, 240_000);

afterAll(async () => {
  await context?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("people and severity in the web console", () => {
  it("adds a member with a role, changes the role, sets their password, and removes them: their session ends at once", async () => {
    await nav(page, "Members").click();
    await page.getByRole("heading", { level: 1, name: "Members" }).waitFor();
    await page.locator(`tr[data-member="${OWNER.email}"]`).waitFor();

    await page.getByLabel("Email").fill("pat@acme.test");
    await page.getByLabel("Initial password").fill(PASSWORD);
    await page.getByLabel("Role", { exact: true }).selectOption("admin");
    await page.getByRole("button", { name: "Add member" }).click();
    const row = page.locator('tr[data-member="pat@acme.test"]');
    await row.waitFor();
    await expect.poll(() => page.getByLabel("Role of pat@acme.test").inputValue(), { timeout: BROWSER_WAIT_MS }).toBe("admin");
    await expectLabelled(page);
    await shot(page, "members");

    const pat = await login("pat@acme.test", PASSWORD);
    expect(pat.status).toBe(200);
    expect((await app.call("GET", "/o/acme/audit-events", { token: pat.token })).status).toBe(200);

    await page.getByLabel("Role of pat@acme.test").selectOption("member");
    await expect.poll(() => page.getByRole("status").filter({ hasText: "pat@acme.test is now member." }).count(), { timeout: BROWSER_WAIT_MS }).toBe(1);
    // The same session, the next request: the new role counts.
    expect((await app.call("GET", "/o/acme/audit-events", { token: pat.token })).status).toBe(403);

    await page.getByRole("button", { name: "Set password of pat@acme.test" }).click();
    await page.getByLabel("New password for pat@acme.test").fill("a brand new password");
    await page.getByRole("button", { name: "Save password" }).click();
    await expect
      .poll(() => page.getByRole("status").filter({ hasText: "The password of pat@acme.test was set" }).count(), { timeout: BROWSER_WAIT_MS })
      .toBe(1);
    expect((await app.call("GET", "/o/acme/members", { token: pat.token })).status).toBe(401);
    expect((await login("pat@acme.test", PASSWORD)).status).toBe(401);
    const again = await login("pat@acme.test", "a brand new password");
    expect(again.status).toBe(200);

    await page.getByRole("button", { name: "Remove pat@acme.test" }).click();
    await confirmIn(page, "Remove");
    await expect.poll(() => row.count(), { timeout: BROWSER_WAIT_MS }).toBe(0);
    expect((await app.call("GET", "/o/acme/members", { token: again.token })).status).toBe(401);
    expect((await login("pat@acme.test", "a brand new password")).status).toBe(401);
  });

  it("refuses what the service refuses: the last owner cannot be demoted", async () => {
    await page.getByLabel(`Role of ${OWNER.email}`).selectOption("admin");
    await expect
      .poll(() => page.getByRole("alert").textContent(), { timeout: BROWSER_WAIT_MS })
      .toBe("an organization needs an owner: make another member owner first");
    await expect.poll(() => page.getByLabel(`Role of ${OWNER.email}`).inputValue(), { timeout: BROWSER_WAIT_MS }).toBe("owner");
  });

  it("changes one's own password; the other sessions end", async () => {
    expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email: "sam@acme.test", password: PASSWORD, role: "member" } })).status).toBe(
      201,
    );
    const sam = await signedIn("sam@acme.test", PASSWORD);
    const other = await login("sam@acme.test", PASSWORD);
    await nav(sam, "Members").click();
    // A member sees the members, with no controls to change them.
    await sam.locator(`tr[data-member="${OWNER.email}"]`).waitFor();
    expect(await sam.getByRole("button", { name: "Remove" }).count()).toBe(0);
    expect(await sam.getByLabel(`Role of ${OWNER.email}`).count()).toBe(0);
    await sam.getByLabel("Current password").fill("not my password");
    await sam.getByLabel("New password", { exact: true }).fill("sam's new password");
    await sam.getByRole("button", { name: "Change password" }).click();
    await expect.poll(() => sam.getByRole("alert").textContent(), { timeout: BROWSER_WAIT_MS }).toBe("currentPassword is not your current password");
    await sam.getByLabel("Current password").fill(PASSWORD);
    await sam.getByRole("button", { name: "Change password" }).click();
    await expect.poll(() => sam.getByRole("status").filter({ hasText: "Your password was changed" }).count(), { timeout: BROWSER_WAIT_MS }).toBe(1);
    expect((await app.call("GET", "/o/acme/members", { token: other.token })).status).toBe(401);
    // This tab's session stays.
    await nav(sam, "Incidents").click();
    await sam.getByRole("heading", { level: 1, name: "Incidents" }).waitFor();
    await expect.poll(() => sam.getByRole("heading", { name: "Sign in" }).count(), { timeout: BROWSER_WAIT_MS }).toBe(0);
    await sam.close();
  });

  it("creates an API key shown once, lists the keys (a member's own; every key for an owner) and revokes one", async () => {
    const sam = await login("sam@acme.test", "sam's new password");
    const samKey = (await app.call("POST", "/o/acme/api-keys", { token: sam.token, body: { name: "sam laptop" } })).body;

    await nav(page, "API keys").click();
    await page.getByRole("heading", { level: 1, name: "API keys" }).waitFor();
    await page.locator(`tr[data-key="${samKey.id}"]`).waitFor();
    await page.getByLabel("Name").fill("deploy job");
    await page.getByRole("button", { name: "Create key" }).click();
    const shown = page.getByLabel('API key "deploy job"');
    await expect.poll(() => shown.inputValue(), { timeout: BROWSER_WAIT_MS }).toMatch(/^wrk_[0-9a-f]{64}$/);
    const key = await shown.inputValue();
    expect((await app.call("GET", "/o/acme/incidents", { token: key })).status).toBe(200);
    await expect.poll(() => page.locator("tbody tr").count(), { timeout: BROWSER_WAIT_MS }).toBe(2);
    await expectLabelled(page);
    await shot(page, "api-keys");
    // Never shown again: a page load lists the key without it.
    await page.reload();
    await page.getByRole("heading", { level: 1, name: "API keys" }).waitFor();
    await page.locator(`tr[data-key="${samKey.id}"]`).waitFor();
    expect(await page.content()).not.toContain(key);

    // A member sees their own keys only.
    const samTab = await signedIn("sam@acme.test", "sam's new password");
    await nav(samTab, "API keys").click();
    await samTab.locator(`tr[data-key="${samKey.id}"]`).waitFor();
    expect(await samTab.locator("tbody tr").count()).toBe(1);
    await samTab.close();

    await page.getByRole("button", { name: "Revoke sam laptop of sam@acme.test" }).click();
    await confirmIn(page, "Revoke");
    expect(nativeDialogs).toEqual([]);
    await expect.poll(() => page.locator(`tr[data-key="${samKey.id}"]`).count(), { timeout: BROWSER_WAIT_MS }).toBe(0);
    expect((await app.call("GET", "/o/acme/incidents", { token: samKey.key })).status).toBe(401);
    expect((await app.call("GET", "/o/acme/incidents", { token: key })).status).toBe(200);
  });

  it("sets an incident's severity from the room, which another person's change updates live", async () => {
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    const opened = await app.call("POST", "/triggers", {
      token: ingest,
      body: { title: "Checkout errors", alert_type: "error", alert_transition: "Triggered", alert_id: "checkout-errors", event_id: "e-1", priority: "P3" },
    });
    expect(opened.status).toBe(201);
    const id = opened.body.incidentId as string;
    await page.goto(`${app.url}/o/acme/incidents/${id}`);
    await page.getByRole("heading", { level: 1, name: "Checkout errors" }).waitFor();
    const control = page.getByLabel("Severity", { exact: true });
    expect(await control.inputValue()).toBe("sev3");

    await control.selectOption("sev1");
    await expect.poll(() => page.locator(".room-badges .sev").textContent(), { timeout: BROWSER_WAIT_MS }).toBe("SEV1");
    await expect.poll(() => page.locator(".timeline > li .kind").allTextContents(), { timeout: BROWSER_WAIT_MS }).toEqual(["Opened", "Severity changed"]);
    await expect
      .poll(() => page.locator(".timeline > li").last().locator(".entry-summary").textContent(), { timeout: BROWSER_WAIT_MS })
      .toBe(`Severity sev3 → sev1 by ${OWNER.email}`);
    expect((await app.call("GET", `/o/acme/incidents/${id}`, { token: owner })).body.severity).toBe("sev1");
    await expectLabelled(page);
    await shot(page, "room-severity");

    // Another person's change arrives without a reload.
    await inPage(page, "window.loadedOnce = true");
    const sam = await login("sam@acme.test", "sam's new password");
    expect((await app.call("PATCH", `/o/acme/incidents/${id}`, { token: sam.token, body: { severity: "sev2" } })).status).toBe(200);
    await expect.poll(() => control.inputValue(), { timeout: BROWSER_WAIT_MS }).toBe("sev2");
    await expect
      .poll(() => page.locator(".timeline > li .kind").allTextContents(), { timeout: BROWSER_WAIT_MS })
      .toEqual(["Opened", "Severity changed", "Severity changed"]);
    expect(await inPage(page, "window.loadedOnce")).toBe(true);

    // A repeat keeps the person's severity.
    await app.call("POST", "/triggers", {
      token: ingest,
      body: { title: "Checkout errors", alert_type: "error", alert_transition: "Re-Triggered", alert_id: "checkout-errors", event_id: "e-2", priority: "P3" },
    });
    await expect
      .poll(() => page.locator(".timeline > li .kind").allTextContents(), { timeout: BROWSER_WAIT_MS })
      .toEqual(["Opened", "Severity changed", "Severity changed", "Repeat"]);
    expect(await control.inputValue()).toBe("sev2");
  });
});
