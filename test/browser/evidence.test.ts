import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { inPage, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { latencySeries } from "../../services/remotesource-kit/testing/latency-series.js";
import { createSourceServer, SourceError, type RunningSourceServer } from "../../services/remotesource-kit/index.js";
import type { TestApp } from "../support/app.js";

// The room shows an incident's evidence in Debian's Chromium: a remote source built with the kit
// (metrics with a unit, log entries with labels, an operation that fails), reads configured on its
// connection, an incident opened while the room is already showing it, and the evidence appearing
// without a reload: a chart with its time axis, the opened time marked and the unit, the log
// table, the partial read with its reason, the runbook first. Saved under test/artifacts/.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");
const SOURCE_TOKEN = `tok-${randomBytes(12).toString("hex")}`;

let app: TestApp;
let source: RunningSourceServer;
let context: BrowserContext;
let page: Page;
let profile: string;
let owner: string;
let ingest: string;
/** Reads wait for this before answering, so the room is showing the incident first. */
let release: () => void = () => {};
let gate = Promise.resolve();

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  source = await createSourceServer({
    source: "room-source",
    kinds: ["metrics", "logs"],
    auth: { bearerTokens: [SOURCE_TOKEN] },
    operations: [
      {
        descriptor: { operation: "deploys.recent", description: "recent deploys", params: {}, kind: "changes" },
        handler: async () => {
          throw new SourceError("not-found", "no deploy history for this tenant");
        },
      },
    ],
    metrics: {
      list: async () => ({ raw: ["latency_ms"] }),
      range: async (call) => {
        await gate;
        return latencySeries(call);
      },
    },
    logs: {
      streams: async () => ({ raw: ["checkout"] }),
      range: async (call) => {
        await gate;
        return {
          raw: { query: call.query },
          entries: [
            { t: call.toMs - 120_000, line: "upstream timed out after 30s", labels: { level: "error", pod: "checkout-7d9" } },
            { t: call.toMs - 60_000, line: "retrying payment provider", labels: { level: "warn", pod: "checkout-7d9" } },
          ],
        };
      },
    },
  }).listen({ host: "127.0.0.1" });
  app = await startConsoleApp({ env: { REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.0/8", REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1" } });
  owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
  const created = await app.call("POST", "/o/acme/remote-sources", {
    token: owner,
    body: { name: "observability", baseUrl: source.url, transport: "http", tenantRef: "tenant-room", auth: { bearerToken: SOURCE_TOKEN } },
  });
  expect(created.status).toBe(201);
  const saved = await app.call("PUT", `/o/acme/remote-sources/${created.body.id}/investigation-reads`, {
    token: owner,
    body: {
      reads: [
        { name: "latency", call: "metrics/range", template: `'latency_ms{service="' + incident.entity.id + '"}'` },
        { name: "logs", call: "logs/range", template: "incident.entity.id" },
        { name: "deploys", call: "invoke", operation: "deploys.recent", template: `{"service": incident.entity.id}` },
      ],
    },
  });
  expect(saved.status, JSON.stringify(saved.body)).toBe(200);

  profile = mkdtempSync(join(tmpdir(), "evidence-chromium-"));
  context = await launchChromium(profile, {
    viewport: { width: 1280, height: 900 },
  });
  context.setDefaultTimeout(BROWSER_WAIT_MS);
  page = context.pages()[0] ?? (await context.newPage());
}, 240_000);

afterAll(async () => {
  release();
  await context?.close();
  await source?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("the room shows an incident's evidence", () => {
  it("evidence appears live as the reads complete: chart, log table, partial reason, one timeline entry", async () => {
    await signInAsOwner(page, `${app.url}/`);

    gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const res = await app.call("POST", "/triggers", {
      token: ingest,
      body: {
        title: "Checkout latency high",
        alert_type: "error",
        alert_transition: "Triggered",
        alert_id: "latency-checkout",
        event_id: "latency-1",
        priority: "P2",
        tags: ["service:checkout", "env:prod"],
      },
    });
    expect(res.status).toBe(201);
    const incidentId = res.body.incidentId;
    await page.goto(`${app.url}/o/acme/incidents/${incidentId}`);
    await page.getByRole("heading", { name: "Checkout latency high" }).waitFor();
    await inPage(page, "window.loadedOnce = true");
    // The reads answer only now; the room was already open.
    release();

    await page.getByRole("heading", { name: "Evidence" }).waitFor();
    await page.getByText(/Investigation 1: 3 reads, 1 partial/).waitFor({ timeout: 20_000 });
    expect(await inPage(page, "window.loadedOnce")).toBe(true);

    // Folded to a sparkline; the full chart on demand.
    expect(await page.getByTestId("evidence-sparkline").locator("polyline").count()).toBe(2);
    await page.getByRole("button", { name: "Show chart" }).click();
    const chart = page.getByTestId("evidence-chart");
    await chart.waitFor();
    expect(await chart.getAttribute("aria-label")).toBe("observability / latency: 2 series in ms");
    expect(await chart.locator("polyline").count()).toBe(2);
    await page.getByTestId("opened-marker").waitFor();
    expect(await page.getByTestId("opened-marker").textContent()).toBe("opened");
    // A time axis (HH:MM ticks) and the unit on the value axis.
    const axisText = await chart.locator("g.axis text").allTextContents();
    expect(axisText.filter((t) => /^\d{2}:\d{2}$/.test(t)).length).toBeGreaterThanOrEqual(3);
    expect(axisText).toContain("ms");

    const rows = page.locator("table.evidence-logs tbody tr");
    await expect.poll(() => rows.count()).toBe(2);
    expect(await rows.nth(0).textContent()).toContain("upstream timed out after 30s");
    expect(await rows.nth(0).textContent()).toContain("level=error pod=checkout-7d9");

    const partial = page.getByRole("status").filter({ hasText: "Partial:" });
    expect(await partial.textContent()).toContain("unknown operation");
    expect(await partial.textContent()).toContain("no deploy history for this tenant");

    const entry = page.locator(".timeline li").filter({ hasText: "Investigation read 3 sources" });
    await expect.poll(() => entry.count()).toBe(1);
    await page.screenshot({ path: join(ARTIFACTS, "console-evidence.png"), fullPage: true });

    // Investigate again: run 2 replaces what the room shows.
    await page.getByRole("button", { name: "Investigate again" }).click();
    await page.getByText(/Investigation 2: 3 reads, 1 partial/).waitFor({ timeout: 20_000 });
  });
});
