import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
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
  }, 60_000);
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
});
