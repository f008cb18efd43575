import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { expectLabelled, inPage, launchChromium, BROWSER_WAIT_MS } from "../support/chromium.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { makeTestCertificates, startChatWebhookReceiver, type ChatWebhookReceiver, type TestCertificates } from "../support/https-receiver.js";
import { startBareSource, type BareSource } from "../../services/remotesource-kit/testing/bare-source.js";
import { startWebhookReceiver, type WebhookReceiver } from "../../services/subscriptions/testing/webhook-receiver.js";
import { OWNER, type TestApp } from "../support/app.js";

// The web console in Debian's Chromium, driven by playwright-core, against the whole service on
// loopback: sign-in, a trigger appearing live, the room's timeline, Test connection for the chat
// webhook (a real HTTPS receiver on loopback) and for a remote source, the approve-and-send flow,
// heartbeats and maintenance windows. Each screen is saved under test/artifacts/.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");

let app: TestApp;
let certs: TestCertificates;
let receiver: ChatWebhookReceiver;
let subscriptionReceiver: WebhookReceiver;
let source: BareSource;
let context: BrowserContext;
let page: Page;
let profile: string;
let owner: string;
let ingest: string;
let firstIncident: string;

const nativeDialogs: string[] = [];

/** Confirms the console's own dialog with its button `label`, and waits for it to close. */
async function confirmDialog(label: string): Promise<void> {
  const dialog = page.getByRole("dialog");
  await dialog.getByRole("button", { name: label, exact: true }).click();
  await dialog.waitFor({ state: "detached" });
}

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(ARTIFACTS, `console-${name}.png`), fullPage: true });
}

function nav(name: string) {
  return page.getByRole("navigation", { name: "Main" }).getByRole("link", { name });
}

async function trigger(body: Record<string, unknown>): Promise<{ status: number; body: any }> {
  return app.call("POST", "/triggers", { token: ingest, body });
}

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  certs = makeTestCertificates();
  receiver = await startChatWebhookReceiver(certs);
  subscriptionReceiver = await startWebhookReceiver(certs);
  source = await startBareSource({});
  app = await startConsoleApp({
    env: {
      EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
      REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.0/8",
      REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1",
      EGRESS_CA_FILE: certs.caFile,
      CHAT_WEBHOOK_TIMEOUT_SECONDS: "3",
    },
  });
  owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
  profile = mkdtempSync(join(tmpdir(), "console-chromium-"));
  context = await launchChromium(profile, {});
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
  // Confirmations are the console's own dialogs; a native one would be a regression.
  page.on("dialog", (dialog) => {
    nativeDialogs.push(dialog.message());
    void dialog.dismiss();
  });
}, 240_000);

afterAll(async () => {
  await context?.close();
  await source?.close();
  await receiver?.close();
  await subscriptionReceiver?.close();
  await app?.stop();
  certs?.remove();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("web console in a browser", () => {
  it("signs in with email, password and organization, keeping the token in sessionStorage", async () => {
    await page.goto(`${app.url}/`);
    await page.getByRole("heading", { name: "warroom" }).waitFor();
    await expectLabelled(page);
    await page.getByLabel("Email").fill(OWNER.email);
    await page.getByLabel("Password").fill("not the password");
    await page.getByLabel("Organization").fill(OWNER.org);
    await shot("login");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toContain("invalid email, password or organization");

    await page.getByLabel("Password").fill(OWNER.password);
    await page.getByLabel("Password").press("Enter");
    await page.getByRole("heading", { name: "Incidents" }).waitFor();
    expect(new URL(page.url()).pathname).toBe("/incidents");
    const stored = await inPage(page, `JSON.parse(sessionStorage.getItem("warroom.session") ?? "null")`);
    expect(stored).toMatchObject({ org: "acme", email: OWNER.email, token: expect.any(String) });
    expect(await inPage(page, "localStorage.length")).toBe(0);
    // A page load keeps the session; the keyboard's first stop is the skip link.
    await page.reload();
    await page.getByRole("heading", { name: "Incidents" }).waitFor();
    await page.keyboard.press("Tab");
    expect(await inPage(page, "document.activeElement?.textContent")).toBe("Skip to content");
  });

  it("shows a trigger in the open list as it arrives, without a reload", async () => {
    await page.getByText("Live", { exact: true }).waitFor();
    await inPage(page, "window.loadedOnce = true");
    const res = await trigger({
      title: "CPU high on checkout",
      body: "CPU above 90% on web-01 for 5 minutes",
      alert_type: "error",
      alert_transition: "Triggered",
      alert_id: "cpu-checkout",
      event_id: "cpu-1",
      priority: "P1",
      tags: ["service:checkout", "env:prod"],
      link: "https://metrics.example.test/monitors/cpu-checkout",
    });
    expect(res.status).toBe(201);
    firstIncident = res.body.incidentId;
    const row = page.locator(`tr[data-incident-id="${firstIncident}"]`);
    await row.waitFor();
    await expect.poll(() => row.getByRole("link").textContent()).toBe("CPU high on checkout");
    await expect.poll(() => row.locator('td[data-label="Source"]').textContent()).toBe("metrics-monitor");
    await expect.poll(() => row.locator('td[data-label="Severity"]').textContent()).toBe("SEV1");
    await expect.poll(() => row.locator('td[data-label="Entity"]').textContent()).toBe("service:checkout");
    await expect.poll(() => row.locator('td[data-label="Age"]').textContent()).toMatch(/just now|\d+ s ago/);
    expect(await inPage(page, "window.loadedOnce")).toBe(true);

    const second = await trigger({
      title: "Disk almost full on db-2",
      alert_type: "warning",
      alert_id: "disk-db",
      event_id: "disk-1",
      tags: ["service:orders-db"],
    });
    expect(second.status).toBe(201);
    await page.locator(`tr[data-incident-id="${second.body.incidentId}"]`).waitFor();
    await expect.poll(() => page.locator("tbody tr").count()).toBe(2);
    await expectLabelled(page);
    await shot("incidents");
  });

  it("opens the room with the full timeline, which grows live", async () => {
    await page.getByRole("link", { name: "CPU high on checkout" }).click();
    await page.getByRole("heading", { level: 1, name: "CPU high on checkout" }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/o/acme/incidents/${firstIncident}`);
    const first = page.locator(".timeline > li").first();
    await expect.poll(() => first.locator(".kind").textContent()).toBe("Opened");
    await expect.poll(() => first.locator(".entry-summary").textContent()).toBe("CPU above 90% on web-01 for 5 minutes");
    expect(await first.getByRole("link", { name: "Open in the source" }).getAttribute("href")).toBe("https://metrics.example.test/monitors/cpu-checkout");
    await expect.poll(() => first.textContent()).toContain("Alert cpu-checkout");

    expect(
      (await trigger({ title: "CPU high on checkout", alert_type: "error", alert_transition: "Re-Triggered", alert_id: "cpu-checkout", event_id: "cpu-2" }))
        .body.outcome,
    ).toBe("attached");
    expect(
      (await trigger({ title: "CPU high on checkout", alert_type: "error", alert_transition: "No Data", alert_id: "cpu-checkout", event_id: "cpu-3" })).body
        .outcome,
    ).toBe("recorded");
    expect(
      (await trigger({ title: "CPU high on checkout", alert_type: "error", alert_transition: "Recovered", alert_id: "cpu-checkout", event_id: "cpu-4" })).body
        .outcome,
    ).toBe("recorded");
    await expect
      .poll(() => page.locator(".timeline > li .kind").allTextContents(), { timeout: BROWSER_WAIT_MS })
      .toEqual(["Opened", "Repeat", "No-data repeat", "Recovery"]);
    await expect.poll(() => page.getByText("4 entries · 1 repeat · 1 recovery · 1 no-data repeat · 0 updates").count()).toBe(1);
    await expectLabelled(page);
    await shot("room");

    // The workspace URL is the room's address: a page load of it opens the room.
    await page.goto(`${app.url}/o/acme/incidents/${firstIncident}`);
    await page.getByRole("heading", { level: 1, name: "CPU high on checkout" }).waitFor();
    await expect.poll(() => page.locator(".timeline > li").count()).toBe(4);
  });

  it("shows a long timeline a page at a time: the first 100 entries, then the rest on request", async () => {
    let id = "";
    for (let i = 0; i <= 130; i++) {
      const res = await trigger({ title: "Disk filling on db-7", alert_type: "error", alert_id: "disk-db-7", event_id: `disk-${i}`, body: `reading ${i}` });
      id ||= res.body.incidentId;
    }
    await page.goto(`${app.url}/o/acme/incidents/${id}`);
    await page.getByRole("heading", { level: 1, name: "Disk filling on db-7" }).waitFor();
    await expect.poll(() => page.locator(".timeline > li").count()).toBe(100);
    await page.getByRole("button", { name: "Show later entries" }).click();
    await expect.poll(() => page.locator(".timeline > li").count()).toBe(131);
    await expect.poll(() => page.locator(".timeline > li .entry-summary").last().textContent()).toBe("reading 130");
    expect(await page.getByRole("button", { name: "Show later entries" }).count()).toBe(0);
  });

  it("tests the chat-webhook connection against a loopback HTTPS receiver", async () => {
    await nav("Integrations").click();
    await page.getByRole("heading", { name: "Integrations" }).waitFor();
    await expect.poll(() => page.locator("#chatwebhook-status").textContent()).toBe("not connected");
    await page.getByLabel("Webhook URL").fill(receiver.url("gone", "console-gone"));
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await expect.poll(() => page.locator("#chatwebhook-status").textContent()).toBe("connected");
    await page.getByRole("button", { name: "Test connection" }).click();
    await expect.poll(() => page.locator("#chatwebhook-test-result").textContent()).toBe("Test failed: Chat webhook HTTP 404");

    await page.getByLabel("Replace the webhook URL").fill(receiver.url("ok", "console-ok"));
    await page.getByRole("button", { name: "Save", exact: true }).click();
    await expect.poll(() => page.locator("#chatwebhook-test-result").count()).toBe(0);
    const before = receiver.posts.length;
    await page.getByRole("button", { name: "Test connection" }).click();
    await expect.poll(() => page.locator("#chatwebhook-test-result").textContent()).toBe("Test message posted: check the channel.");
    const posted = receiver.posts.slice(before);
    expect(posted).toHaveLength(1);
    expect(posted[0]!.path).toContain("/hooks/ok/");
    expect(JSON.stringify(posted[0]!.body)).toContain("Test message from warroom");
    // The saved URL is a secret: the page never shows it again.
    expect(await page.content()).not.toContain("console-ok");
  });

  it("issues the ingest token once, with snippets that work as pasted", async () => {
    await page.getByRole("button", { name: "Issue ingest token" }).click();
    await confirmDialog("Issue");
    const token = await page.getByLabel("Ingest token", { exact: true }).inputValue();
    expect(token).toMatch(/^[0-9a-f]{64}$/);
    expect(await page.getByLabel("Datadog webhook: custom headers").inputValue()).toBe(JSON.stringify({ Authorization: `Bearer ${token}` }, null, 2));
    const payload = JSON.parse(await page.getByLabel("Datadog webhook: payload").inputValue());
    expect(payload).toMatchObject({
      alert_id: "$ALERT_ID",
      event_id: "$ID",
      alert_transition: "$ALERT_TRANSITION",
      tags: expect.arrayContaining(["service:$TAGS[service]"]),
    });
    expect(await page.getByLabel("Heartbeat ping (end of your job)").inputValue()).toContain(`Authorization: Bearer ${token}`);
    // The token on screen is the organization's token now; the one issued before stopped working.
    const filled = {
      ...payload,
      title: "Pasted Datadog body",
      alert_id: "4242",
      event_id: "77",
      alert_type: "error",
      alert_transition: "Triggered",
      tags: ["service:payments"],
      link: "https://app.datadoghq.com/event/jump_to?event_id=77",
      date: "1718186712000",
    };
    expect((await app.call("POST", "/triggers", { token, body: filled })).status).toBe(201);
    expect((await app.call("POST", "/triggers", { token: ingest, body: filled })).status).toBe(401);
    ingest = token;

    await page.getByRole("button", { name: "Issue alert-router secret" }).click();
    await confirmDialog("Issue");
    const secret = await page.getByLabel("Alert-router secret", { exact: true }).inputValue();
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    // The ingest token issued before stays on screen beside it until dismissed.
    expect(await page.getByLabel("Ingest token", { exact: true }).inputValue()).toBe(token);
    const authorization = await page.getByLabel("Alertmanager (any version, 0.25 included): receiver with authorization").inputValue();
    expect(authorization).toContain(`credentials: "${secret}"`);
    const block = await page.getByLabel("Alertmanager (0.28.0 or later): receiver with http_headers").inputValue();
    expect(block).toContain(`url: ${app.url}/triggers/alertrouter`);
    expect(block).toContain("http_headers:");
    expect(block).toContain("X-Service-Alertrouter-Secret:");
    expect(block).toContain(`- ${secret}`);
    await expectLabelled(page);
    await shot("integrations");
  });

  it("runs Test connection on a remote source and shows the conformance report check by check", async () => {
    await page.getByText("Add a remote source").click();
    await page.getByLabel("Name").fill("bare-metrics");
    await page.getByLabel("Base URL").fill(source.httpUrl);
    await page.getByLabel("Tenant reference").fill("tenant-console");
    await page.getByLabel("Bearer token").fill(source.token);
    await page.getByRole("button", { name: "Add source" }).click();
    const item = page.locator(".sources > li", { hasText: "bare-metrics" });
    await item.waitFor();
    await expect.poll(() => item.locator(".badge").first().textContent()).toBe("untested");
    await item.getByRole("button", { name: "Test connection" }).click();
    const rows = item.locator("table.checks tbody tr");
    await rows.first().waitFor({ timeout: 20_000 });
    expect(await rows.count()).toBeGreaterThan(3);
    expect(await rows.locator('td[data-label="Result"]').allTextContents()).toEqual(Array(await rows.count()).fill("pass"));
    await expect.poll(() => item.getByRole("status").textContent()).toMatch(/^Connected: every check passed \(protocol version 1\)/);
    await expect.poll(() => item.locator(".badge").first().textContent()).toBe("connected");
    await shot("integrations-remote-source");
  });

  it("adds a subscription showing its secret once, sends a test event, shows the log and a banner once disabled", async () => {
    subscriptionReceiver.endpoint("console", []);
    await page.getByText("Add a subscription").click();
    await page.getByLabel("Receiver URL").fill(subscriptionReceiver.url("console"));
    await page.getByLabel("Description").fill("console pager");
    await page.getByRole("checkbox", { name: "incident.resolved" }).check();
    await page.getByRole("button", { name: "Add subscription" }).click();
    const secret = await page.locator("#subscription-secret").inputValue();
    expect(secret).toMatch(/^whsec_/);
    subscriptionReceiver.setSecrets("console", [secret]);
    const item = page.locator(".sources > li", { hasText: "console pager" });
    await item.waitFor();
    expect(await item.textContent()).toContain("incident.opened, incident.resolved");
    await item.getByRole("button", { name: "Send test event" }).click();
    // Real egress is still off here: the test was sent, and both the result and the list say that
    // real events are not.
    await expect
      .poll(() => item.locator(".subscription-test-result").textContent())
      .toMatch(/^Test event delivered \(HTTP 204\)\. This test event was sent, but real events are not: the organization's real egress is off/);
    await expect
      .poll(() => page.locator("#subscriptions-egress-off").textContent())
      .toMatch(/^Real egress is off for this organization: events are recorded as simulated/);
    expect(subscriptionReceiver.deliveries).toHaveLength(1);
    expect(subscriptionReceiver.deliveries[0]).toMatchObject({ verified: true });
    await item.getByRole("button", { name: "Delivery log" }).click();
    await expect.poll(() => item.locator(".delivery-log tbody tr").first().textContent()).toContain("subscription.test");
    await expectLabelled(page);
    await shot("integrations-subscriptions");

    const list = await app.call("GET", "/o/acme/subscriptions", { token: owner });
    const id = list.body.subscriptions.find((s: { description: string }) => s.description === "console pager").id;
    expect((await app.call("PATCH", `/o/acme/subscriptions/${id}`, { token: owner, body: { enabled: false } })).status).toBe(200);
    await page.reload();
    const banner = page.locator(`#subscription-banner-${id}`);
    await expect.poll(() => banner.textContent()).toBe(`Disabled: disabled by ${OWNER.email}. Events are not delivered until it is enabled again.`);
    // The secret was shown once: never again after a reload.
    expect(await page.content()).not.toContain(secret);
  });

  it("drafts, previews, approves and sends an update: simulated while egress is off, sent once it is on", async () => {
    await page.goto(`${app.url}/o/acme/incidents/${firstIncident}?tab=comms`);
    await page.getByRole("tab", { name: "Comms", selected: true }).waitFor();
    await page.getByText("Real egress is off").first().waitFor();
    await page.getByLabel("Update text").fill("Rolling back the 14:02 deploy of checkout.");
    const preview = page.locator("form.draft .card-preview");
    await expect.poll(() => preview.locator(".card-title").textContent()).toBe("CPU high on checkout");
    await expect.poll(() => preview.locator(".card-text").textContent()).toBe("Rolling back the 14:02 deploy of checkout.");
    await expect.poll(() => preview.textContent()).toContain(`/o/acme/incidents/${firstIncident}`);
    await expectLabelled(page);
    await page.getByRole("button", { name: "Save draft" }).click();
    const message = page.locator(".messages > li").first();
    await message.getByText("Draft: waiting for approval").waitFor();
    await message.getByRole("button", { name: "Approve" }).click();
    await message.getByText("Approved: ready to send").waitFor();
    const before = receiver.posts.length;
    await message.getByRole("button", { name: "Send" }).click();
    await message.getByText("Simulated: recorded in the room, not delivered (real egress is off).").waitFor();
    await message.locator(".msg-simulated").waitFor();
    expect(receiver.posts.length).toBe(before);
    await shot("comms");

    await nav("Integrations").click();
    await page.getByRole("switch").click();
    await confirmDialog("Switch on");
    await page.getByText("Real egress is on", { exact: true }).waitFor();
    expect((await app.call("GET", "/o/acme/oncall/egress", { token: owner })).body).toEqual({ enabled: true });

    await page.goto(`${app.url}/o/acme/incidents/${firstIncident}?tab=comms`);
    await page.getByText("Real egress is on: an approved update is posted").waitFor();
    await page.getByLabel("Label on the timeline (optional)").fill("status");
    await page.getByLabel("Update text").fill("Rollback done; error rate back to normal.");
    await page.getByRole("button", { name: "Save draft" }).click();
    const drafted = page.locator(".messages > li", { hasText: "Rollback done" });
    await drafted.getByRole("button", { name: "Approve" }).click();
    await drafted.getByRole("button", { name: "Send" }).click();
    await drafted.getByText("Sent: posted to the chat channel.").waitFor();
    await expect.poll(() => drafted.locator(".msg-state").textContent()).toBe("Sent to the chat channel");
    const posts = receiver.posts.slice(before);
    expect(posts).toHaveLength(1);
    expect(JSON.stringify(posts[0]!.body)).toContain("Rollback done; error rate back to normal.");
    await shot("comms-sent");

    await page.getByRole("tab", { name: "Timeline" }).click();
    await expect
      .poll(() => page.locator(".timeline > li .kind").allTextContents())
      .toEqual(["Opened", "Repeat", "No-data repeat", "Recovery", "Update simulated", "Update sent"]);
    await expect.poll(() => page.locator(".entry-update_simulated .delivery").textContent()).toBe("Simulated: recorded here, not delivered");
    await expect.poll(() => page.locator(".entry-update_sent .delivery").textContent()).toBe("Sent to the chat channel");
    await expect.poll(() => page.locator(".entry-update_sent").textContent()).toContain("Channel chatwebhook:status");
    await shot("room-updates");
  });

  it("resolves and archives from the room", async () => {
    await page.getByRole("button", { name: "Resolve" }).click();
    await confirmDialog("Resolve");
    await page.locator(".room-badges .state-resolved").waitFor();
    await expect.poll(async () => (await app.call("GET", `/o/acme/incidents/${firstIncident}`, { token: owner })).body.state).toBe("resolved");
    await page.getByRole("link", { name: "Resolved incidents" }).click();
    await page.locator(`tr[data-incident-id="${firstIncident}"]`).waitFor();
    await page.getByRole("link", { name: "CPU high on checkout" }).click();
    await page.getByRole("button", { name: "Archive" }).click();
    await confirmDialog("Archive");
    await page.locator(".room-badges .state-archived").waitFor();
    await expect.poll(() => page.getByRole("button", { name: "Resolve" }).count()).toBe(0);
    await nav("Incidents").click();
    await page.getByRole("link", { name: "Archived" }).click();
    await page.locator(`tr[data-incident-id="${firstIncident}"]`).waitFor();
  });

  it("registers, edits and deletes a heartbeat, showing last seen, due in and status", async () => {
    await nav("Heartbeats").click();
    await page.getByRole("heading", { name: "Heartbeats" }).waitFor();
    await page.getByLabel("Name").fill("nightly-backup");
    await page.getByLabel("Expected interval").fill("3600");
    await page.getByLabel("Grace").fill("300");
    await page.getByRole("button", { name: "Register" }).click();
    const row = page.locator('tr[data-heartbeat="nightly-backup"]');
    await row.waitFor();
    await expect.poll(() => row.locator('td[data-label="Interval + grace"]').textContent()).toBe("1 h + 5 min");
    await expect.poll(() => row.locator('td[data-label="Last seen"]').textContent()).toBe("never");
    await expect.poll(() => row.locator('td[data-label="Due"]').textContent()).toMatch(/^in 1 h (4|5) min$/);
    await expect.poll(() => row.locator('td[data-label="Status"]').textContent()).toBe("ok");
    const registered = await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: owner });
    expect(registered.body).toMatchObject({ name: "nightly-backup", expectedIntervalSeconds: 3600, graceSeconds: 300, lastSeenAt: null });
    // The ping by the heartbeat's own URL (test/browser/heartbeats.test.ts runs every setup).
    expect(await page.getByLabel("Ping (at the end of the job)").inputValue()).toBe(`curl -fsS -m 10 --retry 5 -o /dev/null "${registered.body.pingUrl}"`);
    await expectLabelled(page);
    await shot("heartbeats");

    expect((await app.call("POST", "/o/acme/heartbeats/nightly-backup/ping", { token: ingest })).status).toBe(204);
    await page.reload();
    await expect.poll(() => row.locator('td[data-label="Last seen"]').textContent()).toMatch(/just now|\d+ s ago/);

    await row.getByRole("button", { name: "Edit nightly-backup" }).click();
    await page.getByLabel("Expected interval").first().fill("7200");
    await page.getByRole("form", { name: "Edit nightly-backup" }).getByRole("button", { name: "Save" }).click();
    await expect.poll(() => row.locator('td[data-label="Interval + grace"]').textContent()).toBe("2 h + 5 min");
    expect((await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: owner })).body.expectedIntervalSeconds).toBe(7200);

    await row.getByRole("button", { name: "Delete nightly-backup" }).click();
    await confirmDialog("Delete");
    await expect.poll(() => row.count()).toBe(0);
    expect((await app.call("GET", "/o/acme/heartbeats/nightly-backup", { token: owner })).status).toBe(404);
  });

  it("shows a heartbeat's pings, a chart of its run times and what the job said", async () => {
    expect(
      (await app.call("POST", "/o/acme/heartbeats", { token: owner, body: { name: "backup-runs", expectedIntervalSeconds: 86400, graceSeconds: 600 } })).status,
    ).toBe(201);
    const signal = (what: string, body = "") =>
      app.call("POST", `/o/acme/heartbeats/backup-runs/ping/${what}`, { token: ingest, raw: body, headers: { "content-type": "text/plain" } });
    expect((await signal("start")).status).toBe(204);
    await new Promise((r) => setTimeout(r, 300));
    expect((await signal("0", "dumped 12 tables")).status).toBe(204);
    expect((await signal("start")).status).toBe(204);
    await new Promise((r) => setTimeout(r, 600));
    expect((await signal("1", "pg_dump: error: connection refused")).status).toBe(204);
    await nav("Heartbeats").click();
    // The previous test left the page here: read the list again.
    await page.reload();
    const row = page.locator('tr[data-heartbeat="backup-runs"]');
    await row.waitFor();
    await row.getByRole("button", { name: "History of backup-runs" }).click();
    const history = page.getByRole("region", { name: "Runs and signals of backup-runs" });
    await history.locator("tr[data-ping-kind]").first().waitFor();
    expect(await history.locator("tr[data-ping-kind]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-ping-kind")))).toEqual([
      "fail",
      "start",
      "success",
      "start",
    ]);
    expect(await history.getByRole("img").getAttribute("aria-label")).toMatch(/^Run times of the last 2 runs/);
    expect(await history.locator("svg rect").count()).toBe(2);
    expect(await history.locator("pre.last-body").textContent()).toBe("pg_dump: error: connection refused");
    expect(await history.locator('tr[data-ping-kind="fail"] td[data-label="Exit status"]').textContent()).toBe("1");
    await expectLabelled(page);
    await shot("heartbeat-history");
  });

  it("creates a maintenance window that suppresses, and ends it now", async () => {
    await nav("Maintenance").click();
    await page.getByLabel("Reason").fill("Database upgrade");
    await page.getByLabel("metrics-monitor").check();
    await page.getByLabel("Entities (optional)").fill("service:orders-db");
    await page.getByRole("button", { name: "Create window" }).click();
    const row = page.locator("tr", { hasText: "Database upgrade" });
    await row.waitFor();
    await expect.poll(() => row.locator('td[data-label="Covers"]').textContent()).toBe("sources metrics-monitor; entities service:orders-db");
    await expect.poll(() => row.locator('td[data-label="Status"]').textContent()).toMatch(/^active, ends in /);
    const suppressed = await trigger({ title: "DB lag", alert_type: "error", alert_id: "db-lag", event_id: "lag-1", tags: ["service:orders-db"] });
    expect(suppressed.body.outcome).toBe("suppressed");
    await expectLabelled(page);
    await shot("maintenance");

    await row.getByRole("button", { name: "End now: Database upgrade" }).click();
    await confirmDialog("End now");
    // Ended, it moves to the past windows instead of vanishing.
    await expect.poll(() => row.locator('td[data-label="Status"]').textContent()).toBe("ended");
    expect(await page.getByRole("table", { name: "Past" }).locator("tr", { hasText: "Database upgrade" }).count()).toBe(1);
    expect(nativeDialogs).toEqual([]);
    const opened = await trigger({ title: "DB lag", alert_type: "error", alert_id: "db-lag", event_id: "lag-2", tags: ["service:orders-db"] });
    expect(opened.body.outcome).toBe("opened");
  });

  it("is readable on a phone", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await nav("Incidents").click();
    await page.getByRole("link", { name: "Open", exact: true }).click();
    const row = page.locator("tbody tr").first();
    await row.waitFor();
    // Rows become cards: no horizontal scrolling, the title first, a number or time labelled with its column.
    expect(await inPage<number>(page, "document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
    expect(await inPage(page, `getComputedStyle(document.querySelector('tbody tr td[data-label="Repeats"]'), "::before").content`)).toBe('"Repeats"');
    await shot("phone-incidents");
    await row.getByRole("link").click();
    await page.locator(".timeline").waitFor();
    expect(await inPage<number>(page, "document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
    await shot("phone-room");
    await page.setViewportSize({ width: 1280, height: 800 });
  });
});
