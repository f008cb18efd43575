import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { startApp, type TestApp } from "../support/app.js";

/**
 * A stolen API key does not take its owner's account over: no password and no key is changed with
 * a key, over REST, Connect or gRPC, and one's own password changes only with the current one.
 */
describe("a stolen admin API key", () => {
  let app: TestApp;
  let adminId: string;
  let adminSession: string;
  let key: string;
  let keyId: string;
  let memberId: string;

  const login = (email: string, password: string) => app.call("POST", "/auth/login", { body: { email, password, orgSlug: "acme" } });

  beforeAll(async () => {
    app = await startApp();
    const owner = await app.ownerToken();
    const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email: "ada@acme.test", password: "ada's own password", role: "admin" } });
    expect(added.status).toBe(201);
    adminId = added.body.id;
    const member = await app.call("POST", "/o/acme/members", { token: owner, body: { email: "mo@acme.test", password: "mo's own password", role: "member" } });
    memberId = member.body.id;
    adminSession = (await login("ada@acme.test", "ada's own password")).body.accessToken;
    const created = await app.call("POST", "/o/acme/api-keys", { token: adminSession, body: { name: "ci" } });
    expect(created.status).toBe(201);
    key = created.body.key;
    keyId = created.body.id;
  });
  afterAll(async () => {
    await app?.stop();
  });

  function clientWith(token: string, protocol: "connect" | "grpc") {
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    };
    const transport =
      protocol === "grpc"
        ? createGrpcTransport({ baseUrl: app.url, interceptors: [bearer] })
        : createConnectTransport({ baseUrl: app.url, httpVersion: "1.1", interceptors: [bearer] });
    return createClient(IdentityService, transport);
  }
  async function codeOf(call: Promise<unknown>): Promise<string> {
    try {
      await call;
      return "ok";
    } catch (err) {
      return Code[ConnectError.from(err).code]!;
    }
  }

  it("cannot set its owner's password, nor anyone's, nor change its owner's own, over REST", async () => {
    const own = await app.call("PUT", `/o/acme/members/${adminId}/password`, { token: key, body: { password: "attacker's password" } });
    expect(own.status).toBe(403);
    expect(own.body.error).toMatch(/signed-in session/);
    expect(own.body.error).toMatch(/PUT \/o\/acme\/me\/password with currentPassword/);
    const other = await app.call("PUT", `/o/acme/members/${memberId}/password`, { token: key, body: { password: "attacker's password" } });
    expect(other.status).toBe(403);
    const me = await app.call("PUT", "/o/acme/me/password", {
      token: key,
      body: { currentPassword: "ada's own password", newPassword: "attacker's password" },
    });
    expect(me.status).toBe(403);
    expect(me.body.error).toMatch(/signed-in session/);
    expect((await login("ada@acme.test", "attacker's password")).status).toBe(401);
    expect((await login("mo@acme.test", "attacker's password")).status).toBe(401);
    expect((await login("ada@acme.test", "ada's own password")).status).toBe(200);
  });

  it("cannot create or revoke keys, over REST", async () => {
    const created = await app.call("POST", "/o/acme/api-keys", { token: key, body: { name: "outlives the stolen one" } });
    expect(created.status).toBe(403);
    const revoked = await app.call("DELETE", `/o/acme/api-keys/${keyId}`, { token: key });
    expect(revoked.status).toBe(403);
    expect(revoked.body.error).toMatch(/signed-in session/);
  });

  it.each(["connect", "grpc"] as const)("is refused the same over %s", async (protocol) => {
    const client = clientWith(key, protocol);
    expect(await codeOf(client.setMemberPassword({ org: "acme", id: adminId, password: "attacker's password" }))).toBe("PermissionDenied");
    expect(await codeOf(client.setMemberPassword({ org: "acme", id: memberId, password: "attacker's password" }))).toBe("PermissionDenied");
    expect(await codeOf(client.changeOwnPassword({ org: "acme", currentPassword: "ada's own password", newPassword: "attacker's password" }))).toBe(
      "PermissionDenied",
    );
    expect(await codeOf(client.createApiKey({ org: "acme", name: "outlives" }))).toBe("PermissionDenied");
    expect(await codeOf(client.deleteApiKey({ org: "acme", id: keyId }))).toBe("PermissionDenied");
    expect((await login("ada@acme.test", "ada's own password")).status).toBe(200);
  });

  it("a session sets other members' passwords, but its own only through me/password with currentPassword", async () => {
    const own = await app.call("PUT", `/o/acme/members/${adminId}/password`, { token: adminSession, body: { password: "set without the old one" } });
    expect(own.status).toBe(403);
    expect(own.body.error).toMatch(/PUT \/o\/acme\/me\/password with currentPassword/);
    expect(await codeOf(clientWith(adminSession, "connect").setMemberPassword({ org: "acme", id: adminId, password: "set without the old one" }))).toBe(
      "PermissionDenied",
    );
    expect((await login("ada@acme.test", "set without the old one")).status).toBe(401);
    expect((await app.call("PUT", `/o/acme/members/${memberId}/password`, { token: adminSession, body: { password: "mo's new password" } })).status).toBe(204);
    expect((await login("mo@acme.test", "mo's new password")).status).toBe(200);
    const changed = await app.call("PUT", "/o/acme/me/password", {
      token: adminSession,
      body: { currentPassword: "ada's own password", newPassword: "ada's next password" },
    });
    expect(changed.status).toBe(204);
    expect((await login("ada@acme.test", "ada's next password")).status).toBe(200);
  });
});
