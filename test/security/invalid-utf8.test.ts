import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/** A JSON body that is not valid UTF-8 is refused with 400, never stored with U+FFFD in its place. */
describe("bodies that are not valid UTF-8", () => {
  let app: TestApp;
  let owner: string;
  let ingest: string;
  let chatSecret: string;

  beforeAll(async () => {
    app = await startApp();
    owner = await app.ownerToken();
    ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    chatSecret = (await app.call("POST", "/o/acme/triggers/chat-secret", { token: owner })).body.secret;
  });
  afterAll(async () => {
    await app?.stop();
  });

  // Latin-1 bytes: "é" becomes the lone byte 0xE9, which is not UTF-8.
  const latin1 = (json: string) => Buffer.from(json, "latin1");

  it("answers 400 on the shared trigger endpoint and stores nothing", async () => {
    const body = latin1(JSON.stringify({ alert_type: "error", title: "disk on café-01", alert_id: "utf8-1", event_id: "utf8-1" }));
    expect(body.includes(0xe9)).toBe(true);
    const res = await app.call("POST", "/triggers", { token: ingest, raw: body, headers: { "content-type": "application/json" } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatch(/UTF-8/);
    const list = await app.call("GET", "/o/acme/incidents", { token: owner });
    expect(JSON.stringify(list.body)).not.toContain("\ufffd");
  });

  it("answers 400 on the chat receiver and on a management route", async () => {
    const chat = await app.call("POST", "/triggers/chat/acme", {
      raw: latin1(JSON.stringify({ channel_id: "C", message_id: "utf8", text: "café down" })),
      headers: { "content-type": "application/json", "x-service-chat-secret": chatSecret },
    });
    expect(chat.status).toBe(400);
    const member = await app.call("POST", "/o/acme/members", {
      token: owner,
      raw: latin1(JSON.stringify({ email: "café@acme.test", password: "password-123", role: "member" })),
      headers: { "content-type": "application/json" },
    });
    expect(member.status).toBe(400);
    expect(member.body.error).toMatch(/UTF-8/);
  });

  it("answers 400 to a path whose percent-escapes are not UTF-8, on every kind of route", async () => {
    for (const [method, path, token] of [
      ["GET", "/o/acme/incidents/%ED%A0%80", owner],
      ["POST", "/o/acme/heartbeats/%ED%A0%80/ping", undefined],
      ["GET", "/o/%E9/heartbeats", owner],
    ] as const) {
      const res = await app.call(method, path, { token });
      expect(res.status, `${method} ${path}`).toBe(400);
      expect(res.body.error, `${method} ${path}`).toMatch(/UTF-8/);
    }
  });
});
