import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOGIN_THROTTLE } from "../../services/identity/login-throttle.js";
import { startApp, type TestApp } from "../support/app.js";

/**
 * Changing one's own password checks the current one: without the login's throttle, a stolen
 * session could guess the password there as fast as the hash queue allows, then log in
 * and lock the person out. A wrong current password counts as a failed login of that account.
 * Its own app: the failures also count against the client address, which every test shares.
 */
describe("guessing the current password through PUT /o/{org}/me/password", () => {
  let app: TestApp;
  let token: string;
  let stolen: string;

  beforeAll(async () => {
    app = await startApp();
    const owner = await app.ownerToken();
    expect(
      (await app.call("POST", "/o/acme/members", { token: owner, body: { email: "kim@acme.test", password: "password-123", role: "member" } })).status,
    ).toBe(201);
    token = (await app.call("POST", "/auth/login", { body: { email: "kim@acme.test", password: "password-123", orgSlug: "acme" } })).body.accessToken;
    stolen = (await app.call("POST", "/auth/login", { body: { email: "kim@acme.test", password: "password-123", orgSlug: "acme" } })).body.accessToken;
  });
  afterAll(async () => {
    await app?.stop();
  });

  it("is throttled like logging in, and the lock holds for logins and for the right password too", async () => {
    const refused: number[] = [];
    let retryAfter = 0;
    // Guess until the lock is long enough to check against while it lasts (the locks double: 1 s, 2 s, 4 s).
    for (let i = 0; i < LOGIN_THROTTLE.accountFreeFailures + 10 && retryAfter < 4; i++) {
      const res = await app.call("PUT", "/o/acme/me/password", { token: stolen, body: { currentPassword: `guess ${i}`, newPassword: "taken over 1" } });
      if (res.status === 429) {
        retryAfter = Number(res.headers.get("retry-after"));
        if (retryAfter < 4) await new Promise((r) => setTimeout(r, retryAfter * 1000));
      } else {
        refused.push(res.status);
      }
    }
    expect(refused.slice(0, LOGIN_THROTTLE.accountFreeFailures)).toEqual(Array(LOGIN_THROTTLE.accountFreeFailures).fill(403));
    expect(retryAfter).toBeGreaterThanOrEqual(4);
    expect((await app.call("POST", "/auth/login", { body: { email: "kim@acme.test", password: "password-123", orgSlug: "acme" } })).status).toBe(429);
    const right = await app.call("PUT", "/o/acme/me/password", { token, body: { currentPassword: "password-123", newPassword: "taken over 1" } });
    expect(right.status).toBe(429);
    expect(right.body.error).toBe("too many failed logins; try again later");
  });
});
