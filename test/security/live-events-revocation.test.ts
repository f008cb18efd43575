import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openEventStream, type OpenStream } from "../../services/console/testing/event-stream.js";
import { startConsoleApp } from "../../services/console/testing/start-console-app.js";
import type { TestApp } from "../support/app.js";

/** A live event stream ends within a second of its session or API key being revoked. */
describe.each([{ nats: false }, { nats: true }])("live event stream revocation (nats: $nats)", ({ nats }) => {
  let app: TestApp;
  let staticDir: string;
  let owner: string;
  const opened: OpenStream[] = [];

  beforeAll(async () => {
    staticDir = mkdtempSync(join(tmpdir(), "console-static-"));
    writeFileSync(join(staticDir, "index.html"), "<!doctype html><title>console</title>");
    // The periodic re-check is a minute, as in production: only the revocation may end the stream.
    app = await startConsoleApp({ nats, console: { staticDir, recheckMs: 60_000 } });
    owner = await app.ownerToken();
  });
  afterAll(async () => {
    for (const s of opened) s.close();
    await app?.stop();
    rmSync(staticDir, { recursive: true, force: true });
  });

  const open = async (token: string) => {
    const s = await openEventStream(`${app.url}/o/acme/events`, { authorization: `Bearer ${token}` });
    opened.push(s);
    expect(s.status).toBe(200);
    await s.next((f) => f.event === "ready");
    return s;
  };
  const endsWithin = (s: OpenStream, ms: number) => Promise.race([s.ended.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

  it("an API key's stream ends within a second of the key's revocation; others stay open", async () => {
    const key = await app.call("POST", "/o/acme/api-keys", { token: owner, body: { name: "dashboard" } });
    const s = await open(key.body.key);
    const other = await open(owner);
    const started = performance.now();
    expect((await app.call("DELETE", `/o/acme/api-keys/${key.body.id}`, { token: owner })).status).toBe(204);
    expect(await endsWithin(s, 1000)).toBe(true);
    console.log(`stream ended ${Math.round(performance.now() - started)} ms after the revoke call began`);
    expect(s.frames.some((f) => f.event === "unauthorized")).toBe(true);
    expect(await endsWithin(other, 300)).toBe(false);
  });

  it("a session's stream ends within a second of its logout", async () => {
    const session = (await app.call("POST", "/auth/login", { body: { email: "owner@acme.test", password: "correct horse battery", orgSlug: "acme" } })).body
      .accessToken;
    const s = await open(session);
    expect((await app.call("POST", "/auth/logout", { token: session })).status).toBe(204);
    expect(await endsWithin(s, 1000)).toBe(true);
  });

  it("a removed member's streams end within a second, by session and by API key; others stay open", async () => {
    const email = `leaver-${nats}@acme.test`;
    const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "password-123", role: "member" } });
    expect(added.status).toBe(201);
    const session = (await app.call("POST", "/auth/login", { body: { email, password: "password-123", orgSlug: "acme" } })).body.accessToken;
    const key = (await app.call("POST", "/o/acme/api-keys", { token: session, body: { name: "wallboard" } })).body.key;
    const bySession = await open(session);
    const byKey = await open(key);
    const other = await open(owner);
    expect((await app.call("DELETE", `/o/acme/members/${added.body.id}`, { token: owner })).status).toBe(204);
    expect(await endsWithin(bySession, 1000)).toBe(true);
    expect(await endsWithin(byKey, 1000)).toBe(true);
    expect(bySession.frames.some((f) => f.event === "unauthorized")).toBe(true);
    expect(await endsWithin(other, 300)).toBe(false);
  });

  it("a person's severity change reaches open streams as incident.severity_changed", async () => {
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    const alert = JSON.parse(readFileSync(new URL("../fixtures/datadog/custom-body-triggered.json", import.meta.url), "utf8"));
    const opened = await app.call("POST", "/triggers", { token: ingest, body: { ...alert, alert_id: `sev-${nats}`, event_id: `sev-${nats}` } });
    expect(opened.status).toBe(201);
    const s = await open(owner);
    expect((await app.call("PATCH", `/o/acme/incidents/${opened.body.incidentId}`, { token: owner, body: { severity: "sev1" } })).status).toBe(200);
    const frame = await s.next((f) => f.event === "incident.severity_changed", 5000);
    expect(JSON.parse(frame.data)).toMatchObject({ incidentId: opened.body.incidentId, from: "sev2", to: "sev1", actor: "owner@acme.test" });
  });
});
