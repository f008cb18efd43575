import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/**
 * Every list the API returns is bounded and paged: walking any of them page by page with its
 * cursor gives every item once, in the list's order, and a cursor from another list is refused.
 */

let app: TestApp;
let owner: string;

beforeAll(async () => {
  app = await startApp({ env: { SECRETS_KEYS: `test1:${Buffer.alloc(32, 3).toString("base64")}` } });
  owner = await app.ownerToken();
});

afterAll(async () => {
  await app?.stop();
});

/** Walks a list with `limit` per page; answers every item's key, in order. */
async function walk(path: string, field: string, key: (item: any) => string, limit: number): Promise<string[]> {
  const seen: string[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 100; page++) {
    const sep = path.includes("?") ? "&" : "?";
    const res = await app.call("GET", `${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { token: owner });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body[field].length).toBeLessThanOrEqual(limit);
    seen.push(...res.body[field].map(key));
    cursor = res.body.nextCursor;
    if (!cursor) return seen;
  }
  throw new Error("the cursor never ended");
}

async function whole(path: string, field: string, key: (item: any) => string): Promise<string[]> {
  const res = await app.call("GET", path, { token: owner });
  expect(res.status).toBe(200);
  expect(res.body.nextCursor).toBeNull();
  return res.body[field].map(key);
}

describe("paged lists", () => {
  it("heartbeats, members, remote sources, comms messages and audit events page with a cursor, each item once", async () => {
    for (let i = 0; i < 7; i++) {
      expect(
        (await app.call("POST", "/o/acme/heartbeats", { token: owner, body: { name: `job-${i}`, expectedIntervalSeconds: 3600, graceSeconds: 60 } })).status,
      ).toBe(201);
      expect(
        (await app.call("POST", "/o/acme/members", { token: owner, body: { email: `m${i}@acme.test`, password: "member password 1", role: "member" } })).status,
      ).toBe(201);
      expect(
        (
          await app.call("POST", "/o/acme/remote-sources", {
            token: owner,
            body: { name: `src-${i}`, baseUrl: "https://source.example.test", transport: "http", auth: { bearerToken: "t" }, tenantRef: "t" },
          })
        ).status,
      ).toBe(201);
    }
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    const opened = await app.call("POST", "/triggers", {
      token: ingest,
      body: { title: "paged", alert_type: "error", alert_id: "paged", event_id: "paged-1" },
    });
    const incident = opened.body.incidentId;
    for (let i = 0; i < 5; i++) {
      expect(
        (await app.call("POST", `/o/acme/incidents/${incident}/comms/messages`, { token: owner, body: { channel: "chatwebhook", body: `update ${i}` } }))
          .status,
      ).toBe(201);
    }

    const lists: Array<[string, string, (item: any) => string]> = [
      ["/o/acme/heartbeats", "heartbeats", (h) => h.name],
      ["/o/acme/members", "members", (m) => m.id],
      ["/o/acme/remote-sources", "remoteSources", (r) => r.id],
      [`/o/acme/incidents/${incident}/comms/messages`, "messages", (m) => m.messageId ?? m.id],
      ["/o/acme/audit-events", "events", (e) => `${e.kind}@${e.at}@${JSON.stringify(e.data)}`],
    ];
    for (const [path, field, key] of lists) {
      const all = await whole(path, field, key);
      expect(all.length, path).toBeGreaterThanOrEqual(5);
      expect(await walk(path, field, key, 2), path).toEqual(all);
      // Another list's cursor is refused, not misread.
      const foreign = Buffer.from("x:whatever").toString("base64url");
      expect((await app.call("GET", `${path}?cursor=${foreign}`, { token: owner })).status, path).toBe(400);
    }
  }, 120_000);
});
