import http from "node:http";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/**
 * Remote sources have their own allow-list, separate from the chat webhook's, and a bearer token
 * never goes to a source over plain http unless an operator names the host.
 */
describe("remote-source egress", () => {
  let listener: http.Server;
  let url: string;
  const seen: string[] = [];

  beforeAll(async () => {
    listener = http.createServer((req, res) => {
      seen.push(req.headers.authorization ?? "");
      res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(listener.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => listener.close(r));
  });

  const withApp = async (env: Record<string, string>, body: (app: TestApp, owner: string) => Promise<void>) => {
    const app = await startApp({ env: { SECRETS_KEYS: `k1:${randomBytes(32).toString("base64")}`, ...env } });
    try {
      await body(app, await app.ownerToken());
    } finally {
      await app.stop();
    }
  };
  const create = (app: TestApp, owner: string, baseUrl: string) =>
    app.call("POST", "/o/acme/remote-sources", {
      token: owner,
      body: { name: `s-${randomBytes(3).toString("hex")}`, baseUrl, transport: "http", auth: { bearerToken: "source-secret-token" }, tenantRef: "t1" },
    });

  it("the chat webhook's EGRESS_ALLOW_PRIVATE_CIDRS does not open loopback to remote sources", async () => {
    await withApp({ EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.1/32", REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1" }, async (app, owner) => {
      const res = await create(app, owner, url);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatch(/baseUrl refused/);
    });
  });

  it("a bearer token is refused for a plain-http source unless its host is allowed by name", async () => {
    await withApp({ REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32" }, async (app, owner) => {
      const refused = await create(app, owner, url);
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatch(/bearer token is sent only over https/);
      expect(seen).toEqual([]);
    });
    await withApp({ REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32", REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1" }, async (app, owner) => {
      const allowed = await create(app, owner, url);
      expect(allowed.status).toBe(201);
      // The operator's allowance is checked again at every call: without it, nothing is sent.
      const tested = await app.call("POST", `/o/acme/remote-sources/${allowed.body.id}/test`, { token: owner });
      expect(tested.status).toBeLessThan(500);
      expect(seen.some((h) => h === "Bearer source-secret-token")).toBe(true);
    });
  });

  it("a refusal names the kind of address a host name leads to, never the address", async () => {
    await withApp({}, async (app, owner) => {
      // localhost resolves to a loopback address; the answer must not say which.
      const webhook = await app.call("PUT", "/o/acme/integrations/chatwebhook/connections/default", {
        token: owner,
        body: { webhookUrl: "https://localhost/hook" },
      });
      expect(webhook.status).toBe(400);
      expect(webhook.body.error).toMatch(/loopback/);
      expect(webhook.body.error).not.toMatch(/127\.0\.0\.1|::1/);
    });
  });
});
