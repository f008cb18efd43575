import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureConsoleBuilt } from "../../services/console/build-if-stale.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import { latencySeries } from "../../services/remotesource-kit/testing/latency-series.js";
import { createSourceServer, type RunningSourceServer } from "../../services/remotesource-kit/index.js";
import type { TestApp } from "../support/app.js";
import { expectAccessible, inPage, launchChromium, signInAsOwner, BROWSER_WAIT_MS } from "../support/chromium.js";

// The console's layout measured in Debian's Chromium: a storm's list on a 1440×900 screen (rows
// in the viewport, one-line times, the filters folding away and remembered), the list and the
// room on a 390-px phone (nothing wider than the screen), and a room whose investigation read 200
// log lines, a metric series and a window with no data (each read folded to a summary, the
// timeline near the top). Saved under test/artifacts/; the docs show copies.

const ARTIFACTS = resolve(import.meta.dirname, "../artifacts");
const SOURCE_TOKEN = `tok-${randomBytes(12).toString("hex")}`;
const LOG_LINES = 200;
const STORM = 30;
const DESKTOP = { width: 1440, height: 900 };
const PHONE = { width: 390, height: 844 };

const SERVICES = ["checkout", "payments", "search", "orders-db", "inventory", "auth", "gateway", "notifications"];
const PROBLEMS = [
  "High error rate (5xx > 5%)",
  "p99 latency above 2 s",
  "Pod crash looping",
  "Disk almost full",
  "Queue backlog growing",
  "Certificate expires in 7 days",
];
/** An entity id, an alert id and a link without a space to break at: the phone must not widen for them. */
const LONG_SERVICE = "checkout-payments-gateway-eu-west-1-canary-blue-green-rollout";
const LONG_LINK = `https://monitoring.example.com/monitors/123456789?from_ts=1764990000000&to_ts=1764993600000&live=true&query=${"service%3A".repeat(12)}${LONG_SERVICE}`;

let app: TestApp;
let source: RunningSourceServer;
let profile: string;
let context: BrowserContext;
let owner: string;
let ingest: string;
let roomId: string;

async function trigger(body: Record<string, unknown>): Promise<string> {
  const res = await app.call("POST", "/triggers", { token: ingest, body });
  expect([200, 201], JSON.stringify(res.body)).toContain(res.status);
  return res.body.incidentId;
}

async function signIn(page: Page): Promise<void> {
  await signInAsOwner(page, `${app.url}/`);
}

/** A page of its own (sessionStorage holds the session, so each signs in). */
async function openPage(viewport: { width: number; height: number }): Promise<Page> {
  const page = await context.newPage();
  await page.setViewportSize(viewport);
  await signIn(page);
  return page;
}

const scrollWidth = (page: Page) => inPage<number>(page, "document.documentElement.scrollWidth");

/** Elements wider than the viewport or reaching past its right edge: what makes a page scroll sideways. */
const overflowing = (page: Page) =>
  inPage<string[]>(
    page,
    `[...document.querySelectorAll("body *")]
      .filter((el) => el.getClientRects().length > 0 && el.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
      .filter((el) => !el.parentElement || el.parentElement.getBoundingClientRect().right <= document.documentElement.clientWidth + 0.5)
      .map((el) => el.tagName.toLowerCase() + (el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : "") + " " + Math.round(el.getBoundingClientRect().width) + "px")`,
  );

beforeAll(async () => {
  ensureConsoleBuilt({ quiet: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  source = await createSourceServer({
    source: "layout-source",
    kinds: ["metrics", "logs"],
    auth: { bearerTokens: [SOURCE_TOKEN] },
    metrics: {
      list: async () => ({ raw: ["latency_ms"] }),
      range: async (call) => latencySeries(call),
    },
    logs: {
      streams: async () => ({ raw: ["checkout"] }),
      range: async (call) => {
        // The quiet stream has nothing in the window; the other has a line every 10 s.
        if (call.query.startsWith("quiet:")) return { raw: { query: call.query, entries: 0 }, entries: [] };
        const lines = Math.min(call.limit ?? LOG_LINES, LOG_LINES);
        return {
          raw: { query: call.query, entries: lines },
          entries: Array.from({ length: lines }, (_, i) => ({
            t: call.toMs - (lines - i) * 10_000,
            line: `${i % 7 === 0 ? "ERROR" : "WARN"} request ${i + 1} to ${LONG_SERVICE} failed: upstream timed out after 30s (trace=${"ab".repeat(24)})`,
            labels: { level: i % 7 === 0 ? "error" : "warn", pod: `${LONG_SERVICE}-7d9f6c-x2k4p` },
          })),
        };
      },
    },
  }).listen({ host: "127.0.0.1" });
  app = await startConsoleApp({ env: { REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.0/8", REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1" } });
  owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;

  // A storm: 30 incidents over 8 services, some repeating, one acknowledged and owned.
  const ids: string[] = [];
  for (let i = 0; i < STORM; i++) {
    const service = SERVICES[i % SERVICES.length]!;
    const body = {
      title: `${PROBLEMS[i % PROBLEMS.length]} on ${service}`,
      alert_type: "error",
      alert_id: `storm-${i}`,
      event_id: `storm-${i}-1`,
      priority: `P${(i % 4) + 1}`,
      tags: [`service:${service}`, "env:prod"],
    };
    ids.push(await trigger(body));
    if (i % 5 === 0) await trigger({ ...body, alert_transition: "Re-Triggered", event_id: `storm-${i}-2` });
  }
  expect((await app.call("POST", `/o/acme/incidents/${ids[3]}/acknowledge`, { token: owner })).status).toBe(200);

  const created = await app.call("POST", "/o/acme/remote-sources", {
    token: owner,
    body: { name: "observability", baseUrl: source.url, transport: "http", tenantRef: "tenant-layout", auth: { bearerToken: SOURCE_TOKEN } },
  });
  expect(created.status).toBe(201);
  const saved = await app.call("PUT", `/o/acme/remote-sources/${created.body.id}/investigation-reads`, {
    token: owner,
    body: {
      reads: [
        { name: "latency", call: "metrics/range", template: `'latency_ms{service="' + incident.entity.id + '"}'` },
        { name: "logs", call: "logs/range", template: "incident.entity.id", limit: LOG_LINES },
        { name: "quiet", call: "logs/range", template: `'quiet:' + incident.entity.id` },
      ],
    },
  });
  expect(saved.status, JSON.stringify(saved.body)).toBe(200);
  roomId = await trigger({
    title: `Checkout latency high on ${LONG_SERVICE}`,
    body: `Latency above 2 s for 10 minutes. Query: avg(last_10m):p99:trace.http.request{service:${LONG_SERVICE},env:prod}.rollup(max,60)>2`,
    alert_type: "error",
    alert_id: `latency-${LONG_SERVICE}-${"x".repeat(40)}`,
    event_id: "latency-1",
    priority: "P1",
    link: LONG_LINK,
    alert_query: `avg(last_10m):p99:trace.http.request{service:${LONG_SERVICE},env:prod,region:eu-west-1}.rollup(max,60)>2`,
    tags: [`service:${LONG_SERVICE}`, "env:prod"],
  });

  profile = mkdtempSync(join(tmpdir(), "layout-chromium-"));
  context = await launchChromium(profile, { viewport: DESKTOP });
  context.setDefaultTimeout(BROWSER_WAIT_MS);
}, 240_000);

afterAll(async () => {
  await context?.close();
  await source?.close();
  await app?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("the incident list is dense on a laptop", () => {
  let page: Page;

  it("shows at least 15 rows of a storm on a 1440×900 screen, each time on one line with the exact time on hover", async () => {
    page = await openPage(DESKTOP);
    await expect.poll(() => page.locator("tbody tr").count()).toBe(STORM + 1);
    const rowsInView = await inPage<number>(
      page,
      `[...document.querySelectorAll("table.incidents tbody tr")].filter((tr) => tr.getBoundingClientRect().bottom <= window.innerHeight).length`,
    );
    await page.screenshot({ path: join(ARTIFACTS, "console-dense.png") });
    expect(rowsInView).toBeGreaterThanOrEqual(15);
    // A relative time takes one line box; the exact time is its title.
    const lineBoxes = await inPage<number[]>(page, `[...document.querySelectorAll("table.incidents tbody td time")].map((t) => t.getClientRects().length)`);
    expect(lineBoxes.length).toBe(2 * (STORM + 1));
    expect(new Set(lineBoxes)).toEqual(new Set([1]));
    expect(await page.locator('table.incidents tbody td[data-label="Age"] time').first().getAttribute("title")).toMatch(/\d{4}, \d{2}:\d{2}:\d{2}/);
  });

  it("folds the filters away behind a toggle, summarises the active ones in one line, and remembers it", async () => {
    const toggle = page.getByRole("button", { name: "Filters", exact: false }).and(page.locator("[aria-controls=incident-filters]"));
    expect(await toggle.getAttribute("aria-expanded")).toBe("true");
    await page.getByLabel("Severity").selectOption("sev1");
    await expect.poll(() => new URL(page.url()).searchParams.get("severity")).toBe("sev1");
    await page.getByLabel("Acknowledged").selectOption("no");
    await expect.poll(() => new URL(page.url()).searchParams.get("acknowledged")).toBe("no");

    await toggle.click();
    expect(await toggle.getAttribute("aria-expanded")).toBe("false");
    expect(await page.locator("#incident-filters").isVisible()).toBe(false);
    const summary = page.getByTestId("filter-summary");
    await expect.poll(() => summary.textContent()).toBe("Severity SEV1 · Not acknowledged · newest first");
    const summaryLines = await inPage<number>(
      page,
      `(() => { const el = document.querySelector("[data-testid=filter-summary]"); return Math.round(el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight)); })()`,
    );
    expect(summaryLines).toBe(1);

    // Folded stays folded on the next load, with the filters still applied from the URL.
    await page.reload();
    await page.getByRole("heading", { name: "Incidents" }).waitFor();
    await expect.poll(() => page.locator("tbody tr").count()).toBeGreaterThan(0);
    expect(await page.locator("#incident-filters").isVisible()).toBe(false);
    expect(await page.locator("[aria-controls=incident-filters]").getAttribute("aria-expanded")).toBe("false");
    await expect.poll(() => summary.textContent()).toBe("Severity SEV1 · Not acknowledged · newest first");
    await expectAccessible(page);

    await page.locator("[aria-controls=incident-filters]").click();
    expect(await page.locator("#incident-filters").isVisible()).toBe(true);
    expect(await page.getByLabel("Severity").inputValue()).toBe("sev1");
    await page.close();
  });
});

describe("on a 390-px phone", () => {
  it("the list opens on incidents, not filters, and does not scroll sideways", async () => {
    const page = await openPage(PHONE);
    await page.evaluate("localStorage.clear()");
    await page.reload();
    await page.getByRole("heading", { name: "Incidents" }).waitFor();
    await expect.poll(() => page.locator("tbody tr").count()).toBe(STORM + 1);
    expect(await page.locator("#incident-filters").isVisible()).toBe(false);
    const firstRow = await inPage<{ top: number; bottom: number }>(
      page,
      `(() => { const r = document.querySelector("table.incidents tbody tr").getBoundingClientRect(); return { top: r.top, bottom: r.bottom }; })()`,
    );
    expect(firstRow.bottom).toBeLessThanOrEqual(PHONE.height);
    expect(await overflowing(page)).toEqual([]);
    expect(await scrollWidth(page)).toBeLessThanOrEqual(PHONE.width);
    await expectAccessible(page);
    await page.screenshot({ path: join(ARTIFACTS, "console-phone.png") });
    await page.close();
  });

  it("the room does not scroll sideways: long ids, links, log lines and data stay in their own boxes", async () => {
    const page = await openPage(PHONE);
    await page.goto(`${app.url}/o/acme/incidents/${roomId}`);
    await page.getByRole("heading", { level: 1, name: /Checkout latency high/ }).waitFor();
    await page.getByText(/Investigation 1: 3 reads/).waitFor({ timeout: 30_000 });
    // Everything unfolded: the full log table, the chart and the delivery data.
    await page.getByRole("button", { name: `Show all ${LOG_LINES} lines` }).click();
    await page.getByRole("button", { name: "Show chart" }).click();
    for (const summary of await page.locator(".timeline details summary").all()) await summary.click();
    expect(await overflowing(page)).toEqual([]);
    expect(await scrollWidth(page)).toBeLessThanOrEqual(PHONE.width);
    await page.getByRole("button", { name: "Show the first 5 lines" }).click();
    await page.screenshot({ path: join(ARTIFACTS, "console-phone-room.png"), fullPage: true });
    await page.close();
  });
});

describe("the room folds evidence to a summary per read", () => {
  it(`keeps the timeline near the top with ${LOG_LINES} log lines, expands on demand, and says when a read found nothing`, async () => {
    const page = await openPage(DESKTOP);
    await page.goto(`${app.url}/o/acme/incidents/${roomId}`);
    await page.getByRole("heading", { level: 1, name: /Checkout latency high/ }).waitFor();
    await page.getByText(/Investigation 1: 3 reads, 0 partial/).waitFor({ timeout: 30_000 });
    const reads = page.getByTestId("evidence-read");
    await expect.poll(() => reads.count()).toBe(3);

    // Metrics: a sparkline and the series' count; the chart on demand.
    const latency = reads.filter({ hasText: "observability / latency" });
    expect(await latency.getByTestId("evidence-sparkline").locator("polyline").count()).toBe(2);
    expect(await latency.textContent()).toContain("2 series in ms");
    expect(await latency.getByTestId("evidence-chart").count()).toBe(0);

    // Logs: the count and the first 5 lines.
    const logs = reads.filter({ hasText: "observability / logs" });
    expect(await logs.textContent()).toContain(`${LOG_LINES} log lines`);
    expect(await logs.locator("table.evidence-logs tbody tr").count()).toBe(5);
    expect(await logs.locator("table.evidence-logs tbody tr").first().textContent()).toContain("request 1 to");

    // The read that found nothing.
    const quiet = reads.filter({ hasText: "observability / quiet" });
    expect(await quiet.textContent()).toContain("No data in the window");
    expect(await quiet.textContent()).not.toContain("Raw answer");

    const layout = await inPage<{ height: number; timelineY: number }>(
      page,
      `({ height: document.documentElement.scrollHeight, timelineY: document.querySelector("ol.timeline").getBoundingClientRect().top + window.scrollY })`,
    );
    expect(layout.timelineY).toBeLessThan(1500);
    expect(layout.height).toBeLessThan(2200);
    await expectAccessible(page);
    await page.screenshot({ path: join(ARTIFACTS, "console-evidence-folded.png"), fullPage: true });

    // On demand: every line, and the full chart; folded again.
    await logs.getByRole("button", { name: `Show all ${LOG_LINES} lines` }).click();
    await expect.poll(() => logs.locator("table.evidence-logs tbody tr").count()).toBe(LOG_LINES);
    await logs.getByRole("button", { name: "Show the first 5 lines" }).click();
    await expect.poll(() => logs.locator("table.evidence-logs tbody tr").count()).toBe(5);
    await latency.getByRole("button", { name: "Show chart" }).click();
    expect(await latency.getByTestId("evidence-chart").locator("polyline").count()).toBe(2);
    expect(await latency.getByRole("button", { name: "Hide chart" }).getAttribute("aria-expanded")).toBe("true");
    await page.close();
  });
});
