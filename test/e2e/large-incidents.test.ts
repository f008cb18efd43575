import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/**
 * An incident whose timeline is larger than one NATS message (140 repeats with 8 KiB summaries,
 * about 1.2 MiB), read and resolved over NATS: the incident carries the first page of its
 * timeline and a cursor, the rest comes page by page, and nothing answers 500.
 */

let app: TestApp;
let owner: string;
let ingest: string;

beforeAll(async () => {
  app = await startApp({ nats: true });
  owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
});

afterAll(async () => {
  await app?.stop();
});

const REPEATS = 140;
const summary = (i: number) => `repeat ${i} `.padEnd(8192, "x");

async function openWithRepeats(alertId: string): Promise<string> {
  let incidentId = "";
  for (let i = 0; i <= REPEATS; i++) {
    const res = await app.call("POST", "/triggers", {
      token: ingest,
      body: {
        title: `Disk full ${alertId}`,
        alert_type: "error",
        alert_transition: "Triggered",
        alert_id: alertId,
        event_id: `${alertId}-${i}`,
        body: summary(i),
        tags: ["service:db"],
      },
    });
    expect(res.status).toBe(i === 0 ? 201 : 200);
    incidentId ||= res.body.incidentId;
  }
  return incidentId;
}

describe("an incident larger than one NATS message", () => {
  it("reads with the first page of its timeline and a cursor to the rest, oldest first", async () => {
    const id = await openWithRepeats("big-read");
    const res = await app.call("GET", `/o/acme/incidents/${id}`, { token: owner });
    expect(res.status).toBe(200);
    expect(res.body.timeline).toHaveLength(100);
    expect(res.body.timeline[0]).toMatchObject({ kind: "opened", summary: summary(0) });
    expect(res.body.timeline[99]).toMatchObject({ kind: "repeat", summary: summary(99) });
    expect(res.body.timelineNextCursor).toEqual(expect.any(String));

    const next = await app.call("GET", `/o/acme/incidents/${id}/timeline?cursor=${encodeURIComponent(res.body.timelineNextCursor)}`, { token: owner });
    expect(next.status).toBe(200);
    expect(next.body.entries).toHaveLength(REPEATS + 1 - 100);
    expect(next.body.entries[0]).toMatchObject({ kind: "repeat", summary: summary(100) });
    expect(next.body.nextCursor ?? undefined).toBeUndefined();

    // Smaller pages walk the same entries, each once.
    const seen: string[] = [];
    let cursor = "";
    for (let page = 0; page < 20; page++) {
      const r = await app.call("GET", `/o/acme/incidents/${id}/timeline?limit=30${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { token: owner });
      expect(r.status).toBe(200);
      seen.push(...r.body.entries.map((e: { summary: string }) => e.summary.slice(0, 12)));
      if (!r.body.nextCursor) break;
      cursor = r.body.nextCursor;
    }
    expect(seen).toEqual(Array.from({ length: REPEATS + 1 }, (_, i) => summary(i).slice(0, 12)));

    expect((await app.call("GET", `/o/acme/incidents/${id}/timeline?limit=501`, { token: owner })).status).toBe(400);
    expect((await app.call("GET", `/o/acme/incidents/${id}/timeline?cursor=bm9wZQ`, { token: owner })).status).toBe(400);
  }, 120_000);

  it("resolves with 200 and the incident resolved, not 500 after the change", async () => {
    const id = await openWithRepeats("big-resolve");
    const res = await app.call("POST", `/o/acme/incidents/${id}/resolve`, { token: owner });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ state: "resolved" });
    expect(res.body.timeline).toHaveLength(100);
    const rest = await app.call("GET", `/o/acme/incidents/${id}/timeline?cursor=${encodeURIComponent(res.body.timelineNextCursor)}`, { token: owner });
    expect(rest.body.entries.at(-1)).toMatchObject({ kind: "resolved" });
  }, 120_000);

  it("lists incidents page by page with a cursor, newest first, each once", async () => {
    for (let i = 0; i < 7; i++) {
      const res = await app.call("POST", "/triggers", {
        token: ingest,
        body: { title: `Paged ${i}`, alert_type: "error", alert_id: `paged-${i}`, event_id: `paged-${i}` },
      });
      expect(res.status).toBe(201);
    }
    const all = (await app.call("GET", "/o/acme/incidents?limit=1000", { token: owner })).body.incidents.map((i: { id: string }) => i.id);
    const walked: string[] = [];
    let cursor = "";
    for (let page = 0; page < 20; page++) {
      const r = await app.call("GET", `/o/acme/incidents?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { token: owner });
      expect(r.status).toBe(200);
      expect(r.body.incidents.length).toBeLessThanOrEqual(3);
      walked.push(...r.body.incidents.map((i: { id: string }) => i.id));
      if (!r.body.nextCursor) break;
      cursor = r.body.nextCursor;
    }
    expect(walked).toEqual(all);
  });
});
