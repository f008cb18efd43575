import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { expectLabelled, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { OWNER, type TestApp } from "../support/app.js";

// The console's custom-source editor in Debian's Chromium, driven by playwright-core, against the
// whole service on loopback: create from blank and from a preset, the credential shown once,
// rules with their save-time errors next to the rule, the preview of a pasted and a recent
// payload, the delivery log, and rotate and revoke behind an in-app confirmation. Each screen is
// saved under test/artifacts/.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");

let app: TestApp;
let context: BrowserContext;
let page: Page;
let profile: string;
/** Browser dialogs opened by the page: the editor confirms in the page, never with one. */
const nativeDialogs: string[] = [];

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `console-custom-sources-${name}.png`), fullPage: true });
}

function deliver(sourceId: string, secret: string, body: unknown) {
  return app.call("POST", `/triggers/custom/${sourceId}`, {
    raw: JSON.stringify(body),
    headers: { "content-type": "application/json", authorization: `Bearer ${secret}` },
  });
}

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  app = await startConsoleApp();
  profile = mkdtempSync(join(tmpdir(), "console-chromium-"));
  context = await launchChromium(profile, {
    viewport: { width: 1280, height: 900 },
  });
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
  page.on("dialog", (dialog) => {
    nativeDialogs.push(dialog.message());
    void dialog.dismiss();
  });
  await signInAsOwner(page, `${app.url}/login`);
}, 240_000);

afterAll(async () => {
  await context?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("the custom-source editor in the web console", () => {
  let sourceId = "";
  let secret = "";

  it("creates a blank source from the Integrations page and shows its credential once, with a copy button", async () => {
    await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Integrations" }).click();
    await page.getByRole("link", { name: "custom sources" }).click();
    await page.getByRole("heading", { level: 1, name: "Custom sources" }).waitFor();
    await page.getByText("No custom sources yet.").waitFor();
    await page.getByText("Add a custom source").click();
    await expectLabelled(page);
    await page.getByLabel("Name (the badge on its incidents)").fill("disk-watcher");
    await page.getByRole("button", { name: "Create source" }).click();

    const shown = page.locator("#new-credential");
    await shown.waitFor();
    secret = await shown.inputValue();
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    sourceId = new URL(page.url()).searchParams.get("id") ?? "";
    expect(await page.locator("#new-credential-url").textContent()).toMatch(new RegExp(`/triggers/custom/${sourceId}$`));
    await expect.poll(() => page.getByRole("button", { name: "Copy", exact: true }).count()).toBe(1);
    await page.getByRole("heading", { name: "Rules of disk-watcher" }).waitFor();
    await shot("created");
    // Shown once: a reload has the source, never its secret.
    await page.reload();
    await page.getByRole("heading", { name: "Rules of disk-watcher" }).waitFor();
    expect(await page.locator("#new-credential").count()).toBe(0);
    expect(await page.content()).not.toContain(secret);
    expect((await deliver(sourceId, secret, { anything: true })).status).toBe(201);
  });

  it("shows a save-time error next to the rule and field it names, then saves the fixed rules", async () => {
    await page.locator("#rule-0-title").fill("body.(");
    await page.getByRole("button", { name: "Save rules" }).click();
    const error = page.locator('li[data-rule-index="0"] .rule-error');
    await error.waitFor();
    expect(await error.textContent()).toMatch(/^Title: does not compile/);
    expect(await page.locator("#rule-0-title").getAttribute("aria-invalid")).toBe("true");
    await shot("rule-error");

    await page.locator("#rule-0-name").fill("full");
    await page.locator("#rule-0-when").fill("body.state == 'alert'");
    await page.locator("#rule-0-title").fill("'Disk full on ' + body.host");
    await page.locator("#rule-0-attachKey").fill("body.host");
    await page.getByRole("button", { name: "Add rule" }).click();
    await page.locator("#rule-1-name").fill("ok");
    await page.locator("#rule-1-when").fill("body.state == 'ok'");
    await page.locator("#rule-1-kind").fill("'recovery'");
    await page.locator("#rule-1-attachKey").fill("body.host");
    await page.getByRole("button", { name: "Save rules" }).click();
    await page.locator("#rules-saved").waitFor();
    expect(await page.locator(".rule-error").count()).toBe(0);
    const saved = await app.call("GET", `/o/${OWNER.org}/custom-sources/${sourceId}`, { token: await app.ownerToken() });
    expect(saved.body.rules.map((r: any) => [r.name, r.when])).toEqual([
      ["full", "body.state == 'alert'"],
      ["ok", "body.state == 'ok'"],
    ]);
    await expectLabelled(page);
  });

  it("previews a pasted payload and a recent one: the verdict of each rule and the incident it would attach to; nothing is created", async () => {
    const opened = await deliver(sourceId, secret, { host: "db1", state: "alert" });
    expect(opened.body.outcome).toBe("opened");
    const owner = await app.ownerToken();
    const before = (await app.call("GET", `/o/${OWNER.org}/incidents`, { token: owner })).body.incidents.length;

    await page.getByLabel("Pasted payload (JSON)").fill('{"host": "db1", "state": "ok"}');
    await page.getByRole("button", { name: "Preview", exact: true }).click();
    await page.locator("#preview-verdicts").waitFor();
    expect(await page.locator('#preview-verdicts tr[data-rule="full"]').textContent()).toContain("condition is false");
    expect(await page.locator('#preview-verdicts tr[data-rule="ok"]').textContent()).toContain("matched");
    expect(await page.locator("#preview-would").textContent()).toMatch(/rule "ok"/);
    const attachLink = page.locator("#preview-would").getByRole("link", { name: "the open incident it would attach to" });
    expect(await attachLink.getAttribute("href")).toBe(`/o/${OWNER.org}/incidents/${opened.body.incidentId}`);
    expect(await page.locator('#preview-fields tr[data-field="kind"]').textContent()).toContain("recovery");
    await shot("preview");

    // A recent payload: the alert just delivered.
    await page.getByRole("button", { name: "Refresh payloads" }).click();
    await expect.poll(() => page.locator("#payload-list > li").count()).toBe(2);
    await page.getByRole("button", { name: "Use in preview" }).first().click();
    expect(await page.getByLabel("Pasted payload (JSON)").isDisabled()).toBe(true);
    await page.getByRole("button", { name: "Preview", exact: true }).click();
    await expect.poll(() => page.locator('#preview-verdicts tr[data-rule="full"]').textContent()).toContain("matched");
    await expect.poll(() => page.locator('#preview-fields tr[data-field="title"]').textContent()).toContain("Disk full on db1");

    // Unsaved rules are previewed as they stand, and a failing one says where the delivery would go.
    await page.locator("#rule-0-title").fill("body.missing.field");
    await page.getByRole("button", { name: "Preview", exact: true }).click();
    await expect.poll(() => page.locator("#preview-would").textContent()).toContain('"Unmapped alert from disk-watcher"');
    expect((await app.call("GET", `/o/${OWNER.org}/incidents`, { token: owner })).body.incidents.length).toBe(before);
    await page.locator("#rule-0-title").fill("'Disk full on ' + body.host");
  });

  it("lists the delivery log with the outcome, the incident and the rule", async () => {
    await page.getByRole("button", { name: "Refresh log" }).click();
    const rows = page.locator("#delivery-log tbody tr");
    await expect.poll(() => rows.count()).toBe(2);
    // Newest first: the alert mapped by rule "full", then the first delivery under the blank rule.
    expect(await rows.first().getAttribute("data-outcome")).toBe("opened");
    expect(await rows.first().locator('td[data-label="Rule or error"]').textContent()).toBe('rule "full"');
    expect(await rows.first().getByRole("link", { name: "open" }).getAttribute("href")).toMatch(new RegExp(`^/o/${OWNER.org}/incidents/`));
    await expectLabelled(page);
    await shot("log");
  });

  it("rotates and revokes the credential only after a confirmation in the page", async () => {
    await page.getByRole("button", { name: "Rotate credential" }).click();
    const confirm = page.getByRole("alertdialog");
    await confirm.waitFor();
    expect(await confirm.textContent()).toContain("The current one stops working at once");
    // Cancel changes nothing.
    await confirm.getByRole("button", { name: "Cancel" }).click();
    expect(await page.getByRole("alertdialog").count()).toBe(0);
    expect((await deliver(sourceId, secret, { host: "db2", state: "alert" })).status).toBe(201);

    await page.getByRole("button", { name: "Rotate credential" }).click();
    await shot("confirm-rotate");
    await page.getByRole("alertdialog").getByRole("button", { name: "Yes, rotate" }).click();
    const rotated = page.locator("#rotated-credential");
    await rotated.waitFor();
    const next = await rotated.inputValue();
    expect(next).toMatch(/^[0-9a-f]{64}$/);
    expect(next).not.toBe(secret);
    expect((await deliver(sourceId, secret, { host: "db3", state: "alert" })).status).toBe(401);
    expect((await deliver(sourceId, next, { host: "db3", state: "alert" })).status).toBe(201);

    await page.getByRole("button", { name: "Revoke credential" }).click();
    await page.getByRole("alertdialog").getByRole("button", { name: "Yes, revoke" }).click();
    await page.locator("#credential-done").waitFor();
    await expect.poll(() => page.locator("#credential-state").textContent()).toBe("revoked");
    expect((await deliver(sourceId, next, { host: "db4", state: "alert" })).status).toBe(401);
    expect(nativeDialogs).toEqual([]);
    await shot("revoked");
  });

  it("starts a source from a preset, whose rules are there to edit", async () => {
    await page.getByText("Add a custom source").click();
    await page.getByLabel("Name (the badge on its incidents)").fill("zabbix-prod");
    await page.getByLabel("Start from").selectOption("zabbix");
    await page.getByRole("button", { name: "Create source" }).click();
    await page.getByRole("heading", { name: "Rules of zabbix-prod" }).waitFor();
    await page.locator("#new-credential").waitFor();
    expect(await page.locator("li.rule").count()).toBeGreaterThan(1);
    expect(await page.locator("#custom-source-list > li").count()).toBe(2);
  });
});
