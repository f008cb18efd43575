import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { inPage, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { OWNER, type TestApp } from "../support/app.js";

// The responder's console in Debian's Chromium against the whole service on loopback: the list a
// responder triages (recovered-at-source marker, repeats, last activity, acknowledgement and
// owner, the time zone, a resolved incident's duration), its filters kept in the URL, and the
// room's Acknowledge, owner picker and note box. Each screen is saved under test/artifacts/.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");

let app: TestApp;
let context: BrowserContext;
let page: Page;
let profile: string;
let owner: string;
let ingest: string;
const ids: Record<string, string> = {};

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `triage-${name}.png`), fullPage: true });
}

async function trigger(body: Record<string, unknown>): Promise<{ status: number; body: any }> {
  return app.call("POST", "/triggers", { token: ingest, body });
}

const row = (name: string) => page.locator(`tr[data-incident-id="${ids[name]}"]`);
const cell = (name: string, label: string) => row(name).locator(`td[data-label="${label}"]`);
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

  const cpu = await trigger({
    title: "CPU high on checkout",
    alert_type: "error",
    alert_id: "cpu",
    event_id: "cpu-1",
    priority: "P1",
    tags: ["service:checkout"],
  });
  ids.cpu = cpu.body.incidentId;
  await trigger({ title: "CPU high on checkout", alert_type: "error", alert_transition: "Re-Triggered", alert_id: "cpu", event_id: "cpu-2", priority: "P1" });
  const disk = await trigger({ title: "Disk almost full on db-2", alert_type: "warning", alert_id: "disk", event_id: "disk-1", tags: ["service:orders-db"] });
  ids.disk = disk.body.incidentId;
  await trigger({ title: "Disk almost full on db-2", alert_type: "success", alert_transition: "Recovered", alert_id: "disk", event_id: "disk-2" });
  const old = await trigger({ title: "Queue backlog", alert_type: "warning", alert_id: "queue", event_id: "queue-1", tags: ["service:queue"] });
  ids.old = old.body.incidentId;
  expect((await app.call("POST", `/o/acme/incidents/${ids.old}/resolve`, { token: owner })).status).toBe(200);

  profile = mkdtempSync(join(tmpdir(), "triage-chromium-"));
  context = await launchChromium(profile, {
    timezoneId: "Europe/Berlin",
  });
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
  page.on("dialog", (dialog) => void dialog.accept());
}, 240_000);

afterAll(async () => {
  await context?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("triage and respond in the console", () => {
  it("lists what a responder needs: recovered at source, repeats, last activity, acknowledgement, the time zone", async () => {
    await signInAsOwner(page, `${app.url}/`);
    await row("cpu").waitFor();

    await expect.poll(() => cell("cpu", "Repeats").textContent()).toBe("1");
    await expect.poll(() => cell("disk", "Incident").textContent()).toContain("Recovered at source");
    expect(await cell("cpu", "Incident").textContent()).not.toContain("Recovered at source");
    await expect.poll(() => cell("cpu", "Last activity").textContent()).toMatch(/just now|\d+ s ago/);
    expect(await cell("cpu", "Responder").textContent()).toBe("Not acknowledged");
    await page.getByText("Times in Europe/Berlin").waitFor();
    expect(await cell("cpu", "Last activity").locator("time").getAttribute("title")).toMatch(/GMT\+1|CET/);
    await shot("list");
  });

  it("keeps filters and sort in the URL, so a link shares the view", async () => {
    await page.getByLabel("Severity").selectOption("sev1");
    await expect.poll(() => new URL(page.url()).searchParams.get("severity")).toBe("sev1");
    await expect.poll(visibleIds).toEqual([ids.cpu]);

    await page.getByLabel("Severity").selectOption("");
    await page.getByLabel("Title contains").fill("disk");
    await page.getByRole("button", { name: "Search" }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get("q")).toBe("disk");
    await expect.poll(visibleIds).toEqual([ids.disk]);

    // The same link in a fresh load shows the same view, its controls set.
    await page.goto(`${app.url}/incidents?state=open&sort=severity&acknowledged=no`);
    await expect.poll(visibleIds).toEqual([ids.cpu, ids.disk]);
    expect(await page.getByLabel("Sort").inputValue()).toBe("severity");
    expect(await page.getByLabel("Acknowledged").inputValue()).toBe("no");
    await page.getByLabel("Entity id").fill("orders-db");
    await page.getByLabel("Entity id").press("Tab");
    await expect.poll(() => new URL(page.url()).searchParams.get("entityId")).toBe("orders-db");
    await expect.poll(visibleIds).toEqual([ids.disk]);
    await shot("filtered");
  });

  it("acknowledges, assigns an owner and adds a note in the room, each on the timeline", async () => {
    await page.goto(`${app.url}/o/acme/incidents/${ids.cpu}`);
    await page.getByRole("heading", { level: 1, name: "CPU high on checkout" }).waitFor();
    await page.getByRole("button", { name: "Acknowledge" }).click();
    await expect
      .poll(() => page.locator(".respond .badge.acknowledged").textContent())
      .toMatch(new RegExp(`^Acknowledged by ${OWNER.email} at .*(GMT\\+1|CET)$`));
    expect(await page.getByRole("button", { name: "Acknowledge" }).count()).toBe(0);
    await expect.poll(() => page.locator(".timeline .kind").allTextContents()).toContain("Acknowledged");

    await page.getByLabel("Owner", { exact: true }).selectOption({ label: "responder@acme.test" });
    await expect.poll(() => page.locator(".timeline .kind").allTextContents()).toContain("Owner changed");
    await page.getByLabel("Note for the timeline").fill("Rolled back the 14:02 deploy");
    await page.getByRole("button", { name: "Add note" }).click();
    await expect.poll(() => page.locator(".timeline .entry-note .entry-summary").allTextContents()).toEqual(["Rolled back the 14:02 deploy"]);
    expect(await page.getByLabel("Note for the timeline").inputValue()).toBe("");
    await shot("room");

    await page.goto(`${app.url}/incidents?state=open&acknowledged=yes`);
    await expect.poll(visibleIds).toEqual([ids.cpu]);
    await expect.poll(() => cell("cpu", "Responder").textContent()).toBe(`Ack ${OWNER.email}Owner responder@acme.test`);
  });

  it("shows a resolved incident's duration, not its age", async () => {
    await page.goto(`${app.url}/incidents?state=resolved`);
    await row("old").waitFor();
    expect(await page.locator("thead").textContent()).toContain("Duration");
    await expect.poll(() => cell("old", "Duration").textContent()).toMatch(/^\d+ s$/);
  });

  it("shows each update's times, edits and discards a draft, and leaves approval to a second person when the setting asks", async () => {
    await page.goto(`${app.url}/o/acme/incidents/${ids.cpu}?tab=comms`);
    await page.getByLabel("Update text", { exact: true }).fill("Investigating");
    await page.getByRole("button", { name: "Save draft" }).click();
    const update = page.locator(".messages > li").first();
    await expect.poll(() => update.locator(".message-times").textContent()).toMatch(new RegExp(`^Drafted by ${OWNER.email} .*(GMT\\+1|CET)$`));

    await update.getByRole("button", { name: "Edit" }).click();
    await update.getByLabel("Edit the update text").fill("Investigating checkout errors");
    await update.getByRole("button", { name: "Save changes" }).click();
    await expect.poll(() => update.locator(".card-text").textContent()).toBe("Investigating checkout errors");
    await expect.poll(() => update.locator(".message-times li").allTextContents()).toHaveLength(2);
    expect((await update.locator(".message-times li").allTextContents())[1]).toMatch(new RegExp(`^Edited by ${OWNER.email} `));

    await page.getByLabel("Update text", { exact: true }).fill("Never mind");
    await page.getByRole("button", { name: "Save draft" }).click();
    const second = page.locator(".messages > li").nth(1);
    await second.getByRole("button", { name: "Discard" }).click();
    await expect.poll(() => second.locator(".msg-state").textContent()).toBe("Discarded: never sent");

    // The setting: the author's Approve gives way to a note, and the service refuses them anyway.
    const setting = page.getByLabel("A second person must approve each update (an admin changes this)");
    await setting.click();
    await expect.poll(() => setting.isChecked()).toBe(true);
    await expect.poll(() => update.textContent()).toContain("You wrote this update: a second person approves it.");
    expect(await update.getByRole("button", { name: "Approve" }).count()).toBe(0);
    const messageId = await update.getAttribute("data-message-id");
    const listed = (await app.call("GET", `/o/acme/incidents/${ids.cpu}/comms/messages`, { token: owner })).body.messages[0];
    const own = await app.call("POST", `/o/acme/incidents/${ids.cpu}/comms/messages/${messageId}/approve`, { token: owner, body: { version: listed.version } });
    expect(own.status).toBe(403);
    const responder = (await app.call("POST", "/auth/login", { body: { email: "responder@acme.test", password: "responder password", orgSlug: "acme" } })).body
      .accessToken;
    const approved = await app.call("POST", `/o/acme/incidents/${ids.cpu}/comms/messages/${messageId}/approve`, {
      token: responder,
      body: { version: listed.version },
    });
    expect(approved.status).toBe(200);
    await page.reload();
    await expect.poll(() => page.locator(".messages > li").first().locator(".message-times").textContent()).toContain("Approved by responder@acme.test");
    await shot("comms");
  });
});
