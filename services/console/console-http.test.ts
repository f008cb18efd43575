import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClients, type Clients } from "../runtime/transport/clients.js";
import { createInMemoryEventBus } from "../runtime/transport/event-bus.js";
import type { TestApp } from "../../test/support/app.js";
import { createConsoleHttp } from "./console-http.js";
import { openEventStream, type OpenStream } from "./testing/event-stream.js";
import { startConsoleApp } from "./testing/start-console-app.js";

// The console's HTTP side over real HTTP: its files, the page-load fallback that never shadows a
// REST route, and the live event stream GET /o/{org}/events. A small stand-in build (an
// index.html and one hashed asset) keeps these tests independent of `npm run build:console`.

const ASSET = "assets/index-Abc123xy.js";
const ASSET_BODY = `console.log(${JSON.stringify("x".repeat(4000))});\n`;
const INDEX = `<!doctype html><html><head><script type="module" src="/${ASSET}"></script></head><body><div id="app"></div></body></html>`;
const HTML = { accept: "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8" };

let app: TestApp;
let staticDir: string;
let owner: string;
let ingest: string;
let clients: Clients;
const opened: OpenStream[] = [];

async function stream(org: string, headers: Record<string, string> = {}, query = ""): Promise<OpenStream> {
  const s = await openEventStream(`${app.url}/o/${org}/events${query}`, headers);
  opened.push(s);
  return s;
}

async function trigger(token: string, alertId: string): Promise<string> {
  const res = await app.call("POST", "/triggers", {
    token,
    body: { title: `Console ${alertId}`, alert_type: "error", alert_id: alertId, event_id: `${alertId}-1`, tags: ["service:checkout"] },
  });
  expect(res.status).toBe(201);
  return res.body.incidentId as string;
}

beforeAll(async () => {
  staticDir = mkdtempSync(join(tmpdir(), "console-static-"));
  mkdirSync(join(staticDir, "assets"));
  writeFileSync(join(staticDir, "index.html"), INDEX);
  writeFileSync(join(staticDir, ASSET), ASSET_BODY);
  writeFileSync(join(staticDir, "favicon.svg"), "<svg xmlns='http://www.w3.org/2000/svg'/>");
  writeFileSync(join(staticDir, ".env"), "SECRET=1");
  app = await startConsoleApp({ env: { SHUTDOWN_GRACE_SECONDS: "120" }, console: { staticDir, keepaliveMs: 100, recheckMs: 300 } });
  clients = createClients(app.process.transport);
  owner = await app.ownerToken();
  ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
});

afterAll(async () => {
  for (const s of opened) s.close();
  await app?.stop();
  rmSync(staticDir, { recursive: true, force: true });
});

describe("console files", () => {
  it("serves index.html at / as HTML that is always revalidated, with a strict content security policy", async () => {
    for (const path of ["/", "/index.html"]) {
      const res = await fetch(app.url + path);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(res.headers.get("cache-control")).toBe("no-cache");
      expect(res.headers.get("content-security-policy")).toContain("default-src 'self'");
      expect(res.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(await res.text()).toBe(INDEX);
    }
    const head = await fetch(`${app.url}/`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
  });

  it("serves hashed assets with their content type, cached for a year, gzipped on request, 304 on a matching ETag", async () => {
    const plain = await new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
      http
        .get(`${app.url}/${ASSET}`, { headers: { "accept-encoding": "gzip" } }, (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        })
        .on("error", reject);
    });
    expect(plain.status).toBe(200);
    expect(plain.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect(plain.headers["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect(plain.headers["content-encoding"]).toBe("gzip");
    expect(plain.body.length).toBeLessThan(ASSET_BODY.length);
    expect(gunzipSync(plain.body).toString()).toBe(ASSET_BODY);

    const etag = plain.headers.etag!;
    const again = await fetch(`${app.url}/${ASSET}`, { headers: { "if-none-match": etag } });
    expect(again.status).toBe(304);

    const icon = await fetch(`${app.url}/favicon.svg`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get("content-type")).toBe("image/svg+xml");
    expect(icon.headers.get("cache-control")).toBe("public, max-age=3600");

    const missing = await fetch(`${app.url}/assets/index-gone.js`, { headers: HTML });
    expect(missing.status).toBe(404);
  });

  it("answers page loads of client routes with index.html, and leaves every other request to the API", async () => {
    for (const path of ["/incidents", "/incidents?state=resolved", "/integrations", "/heartbeats", "/maintenance", "/login"]) {
      const res = await fetch(app.url + path, { headers: HTML });
      expect(res.status, path).toBe(200);
      expect(await res.text()).toBe(INDEX);
    }
    const api = await fetch(`${app.url}/integrations`, { headers: { accept: "application/json" } });
    expect(api.status).toBe(404);
    expect(api.headers.get("content-type")).toContain("application/json");
    const post = await fetch(`${app.url}/incidents`, { method: "POST", headers: HTML });
    expect(post.status).toBe(404);
  });

  it("never shadows a REST route: only a page load of an incident's room link gets the console", async () => {
    const incidentId = await trigger(ingest, "rest-wins");
    const list = await fetch(`${app.url}/o/acme/incidents`, { headers: HTML });
    expect(list.status).toBe(401);
    expect(await list.json()).toEqual({ error: expect.stringContaining("missing credential") });

    const withCredential = await app.call("GET", `/o/acme/incidents/${incidentId}`, { token: owner, headers: HTML });
    expect(withCredential.status).toBe(200);
    expect(withCredential.body.id).toBe(incidentId);
    expect(withCredential.body.workspaceUrl).toMatch(new RegExp(`/o/acme/incidents/${incidentId}$`));

    // The workspace URL, followed from a chat card: a browser page load without a credential.
    const room = await fetch(`${app.url}${new URL(withCredential.body.workspaceUrl).pathname}`, { headers: HTML });
    expect(room.status).toBe(200);
    expect(await room.text()).toBe(INDEX);
    const apiClient = await fetch(`${app.url}/o/acme/incidents/${incidentId}`);
    expect(apiClient.status).toBe(401);

    const login = await app.call("POST", "/auth/login", {
      body: { email: "owner@acme.test", password: "correct horse battery", orgSlug: "acme" },
      headers: HTML,
    });
    expect(login.status).toBe(200);
    expect(typeof login.body.accessToken).toBe("string");
    const health = await fetch(`${app.url}/healthz`, { headers: HTML });
    expect(await health.json()).toEqual({ status: "ok" });
    const wrongMethod = await fetch(`${app.url}/triggers`, { headers: HTML });
    expect(wrongMethod.status).toBe(405);
  });

  it("serves nothing outside the console folder and no dotfile", async () => {
    for (const path of ["/%2e%2e/%2e%2e/package.json", "/assets/..%2f..%2fpackage.json", "/.env", "/%2eenv", "/assets/%00.js"]) {
      const res = await fetch(app.url + path, { headers: { accept: "*/*" } });
      expect(res.status, path).toBe(404);
      expect(await res.text()).not.toContain("SECRET");
    }
  });

  it("says the console is not built, with a 503 page, when its folder is empty", async () => {
    const empty = mkdtempSync(join(tmpdir(), "console-empty-"));
    const handler = createConsoleHttp(
      app.process.config,
      { events: createInMemoryEventBus(app.process.logger), clients, logger: app.process.logger },
      { staticDir: empty },
    );
    const server = http.createServer((req, res) => {
      void handler.handle(req, res, new URL(req.url ?? "/", "http://localhost")).then((handled) => {
        if (!handled) res.writeHead(404).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/incidents`, { headers: HTML });
      expect(res.status).toBe(503);
      expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(await res.text()).toContain("npm run build:console");
    } finally {
      handler.close?.();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe("live events: GET /o/{org}/events", () => {
  it("refuses a missing, unknown or query-string credential (401) and another organization's credential (403)", async () => {
    const none = await stream("acme");
    expect(none.status).toBe(401);
    expect(none.body).toEqual({ error: expect.stringContaining("missing credential") });
    const query = await stream("acme", {}, `?access_token=${owner}`);
    expect(query.status).toBe(401);
    const unknown = await stream("acme", { authorization: `Bearer ${"0".repeat(64)}` });
    expect(unknown.status).toBe(401);
    const other = await stream("globex", { authorization: `Bearer ${owner}` });
    expect(other.status).toBe(403);
    const post = await fetch(`${app.url}/o/acme/events`, { method: "POST", headers: { authorization: `Bearer ${owner}` } });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET");
    const malformed = await fetch(`${app.url}/o/%E9/events`, { headers: { authorization: `Bearer ${owner}` } });
    expect(malformed.status).toBe(400);
    expect(await malformed.json()).toEqual({ error: "request path is not valid UTF-8" });
  });

  it("streams the organization's incident and update events as they happen", async () => {
    const s = await stream("acme", { authorization: `Bearer ${owner}` });
    expect(s.status).toBe(200);
    expect(s.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    expect(s.headers.get("cache-control")).toBe("no-cache, no-transform");
    expect(JSON.parse((await s.next((f) => f.event === "ready")).data)).toEqual({ org: "acme" });

    const incidentId = await trigger(ingest, "live-1");
    const openedFrame = await s.next((f) => f.event === "incident.opened");
    expect(JSON.parse(openedFrame.data)).toMatchObject({ incidentId, title: "Console live-1", severity: "sev2", source: "metrics-monitor" });
    expect(JSON.parse(openedFrame.data)).not.toHaveProperty("orgId");
    expect(openedFrame.id).toBeTruthy();
    const recorded = await s.next((f) => f.event === "incident.timeline_recorded" && JSON.parse(f.data).incidentId === incidentId);
    expect(JSON.parse(recorded.data)).toMatchObject({ incidentId, kind: "opened" });

    const draft = await app.call("POST", `/o/acme/incidents/${incidentId}/comms/messages`, {
      token: owner,
      body: { channel: "chatwebhook", body: "Rolling back" },
    });
    expect(draft.status).toBe(201);
    const approved = await app.call("POST", `/o/acme/incidents/${incidentId}/comms/messages/${draft.body.messageId}/approve`, {
      token: owner,
      body: { version: draft.body.version },
    });
    expect(approved.status).toBe(200);
    const sent = await app.call("POST", `/o/acme/incidents/${incidentId}/comms/messages/${draft.body.messageId}/send`, { token: owner });
    expect(sent.body.state).toBe("simulated");
    const update = await s.next((f) => f.event === "update.sent");
    expect(JSON.parse(update.data)).toMatchObject({ incidentId, messageId: draft.body.messageId, state: "simulated" });

    expect((await app.call("POST", `/o/acme/incidents/${incidentId}/resolve`, { token: owner })).status).toBe(200);
    const resolved = await s.next((f) => f.event === "incident.resolved");
    expect(JSON.parse(resolved.data)).toMatchObject({ incidentId, state: "resolved" });
  });

  it("sends an organization's events to its own streams only", async () => {
    const globex = await clients.identity.bootstrap({ orgSlug: "globex", ownerEmail: "owner@globex.test", ownerPassword: "globex password 1" });
    expect(globex.organization?.slug).toBe("globex");
    const login = await app.call("POST", "/auth/login", { body: { email: "owner@globex.test", password: "globex password 1", orgSlug: "globex" } });
    const globexOwner = login.body.accessToken as string;
    const globexIngest = (await app.call("POST", "/o/globex/triggers/ingest-token", { token: globexOwner })).body.token as string;

    const acme = await stream("acme", { authorization: `Bearer ${owner}` });
    const other = await stream("globex", { authorization: `Bearer ${globexOwner}` });
    await acme.next((f) => f.event === "ready");
    await other.next((f) => f.event === "ready");
    const globexIncident = await trigger(globexIngest, "globex-1");
    await other.next((f) => f.event === "incident.opened" && JSON.parse(f.data).incidentId === globexIncident);
    // Events are handed out in order: once acme's own arrives, globex's would have come first.
    const acmeIncident = await trigger(ingest, "acme-after-globex");
    await acme.next((f) => f.event === "incident.opened" && JSON.parse(f.data).incidentId === acmeIncident);
    expect(acme.frames.some((f) => f.data.includes(globexIncident))).toBe(false);
    expect(other.frames.some((f) => f.data.includes(acmeIncident))).toBe(false);
  });

  it("keeps the stream alive with comments and ends it once the credential is revoked", async () => {
    const login = await app.call("POST", "/auth/login", { body: { email: "owner@acme.test", password: "correct horse battery", orgSlug: "acme" } });
    const session = login.body.accessToken as string;
    const s = await stream("acme", { authorization: `Bearer ${session}` });
    await s.next((f) => f.event === "ready");
    expect((await app.call("POST", "/auth/logout", { token: session })).status).toBe(204);
    await s.next((f) => f.event === "unauthorized", 5_000);
    await s.ended;
  });

  it("ends every open stream when the process stops, without waiting for the drain grace", async () => {
    const s = await stream("acme", { authorization: `Bearer ${owner}` });
    await s.next((f) => f.event === "ready");
    const started = performance.now();
    await app.process.stop();
    await s.ended;
    // SHUTDOWN_GRACE_SECONDS is 120 here: an open stream would hold the drain that long. 20 s
    // tells the two apart on any machine (the stop takes well under a second).
    expect(performance.now() - started).toBeLessThan(20_000);
  });
});

describe("live events over NATS", () => {
  let natsApp: TestApp;
  beforeAll(async () => {
    natsApp = await startConsoleApp({ nats: true, console: { staticDir } });
  });
  afterAll(async () => {
    await natsApp?.stop();
  });

  it("reaches the stream through JetStream, the way a separate gateway process gets them", async () => {
    const token = await natsApp.ownerToken();
    const natsIngest = (await natsApp.call("POST", "/o/acme/triggers/ingest-token", { token })).body.token as string;
    const s = await openEventStream(`${natsApp.url}/o/acme/events`, { authorization: `Bearer ${token}` });
    opened.push(s);
    await s.next((f) => f.event === "ready");
    const res = await natsApp.call("POST", "/triggers", {
      token: natsIngest,
      body: { title: "Over NATS", alert_type: "error", alert_id: "nats-1", event_id: "n1" },
    });
    expect(res.status).toBe(201);
    const frame = await s.next((f) => f.event === "incident.opened" && JSON.parse(f.data).incidentId === res.body.incidentId, 10_000);
    expect(JSON.parse(frame.data).title).toBe("Over NATS");
  });
});
