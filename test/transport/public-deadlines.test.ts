import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/**
 * A public Connect call ends at the deadline its caller set (`connect-timeout-ms`), answered
 * deadline_exceeded, whether its handler runs in this process or behind NATS. The handler is held
 * up on a lock a transaction of the test's own holds, and the answer must come while it is held:
 * before, a handler of the same process ran to its end and answered 200 once the lock was let go.
 */
describe.each([
  ["in one process", false],
  ["with its services over NATS", true],
] as const)("a public call's deadline %s", (_, nats) => {
  let app: TestApp;
  let owner: string;
  let holder: postgres.Sql;

  beforeAll(async () => {
    app = await startApp({ nats });
    owner = await app.ownerToken();
    holder = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await holder?.end();
    await app?.stop();
  });

  it("answers deadline_exceeded at the deadline while the handler still waits, and the call can be made again", async () => {
    const email = `held-${nats ? "nats" : "direct"}@acme.test`;
    const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "password-123", role: "member" } });
    expect(added.status, JSON.stringify(added.body)).toBe(201);
    const update = (timeoutMs: number) =>
      app.call("POST", "/warroom.identity.v1.IdentityService/UpdateMember", {
        token: owner,
        body: { org: "acme", id: added.body.id, role: "admin" },
        headers: { "connect-timeout-ms": String(timeoutMs) },
      });

    let whileHeld: { status: number; body: any } | "still waiting after 20 s" = "still waiting after 20 s";
    await holder.begin(async (tx) => {
      await tx`select 1 from identity.memberships where user_id = ${added.body.id} for update`;
      const call = update(500);
      whileHeld = await Promise.race([call, new Promise<typeof whileHeld>((r) => setTimeout(() => r("still waiting after 20 s"), 20_000))]);
    });
    expect(whileHeld).toMatchObject({ status: 504, body: { code: "deadline_exceeded" } });

    // The lock let go, the same call with time to run is answered.
    const again = await update(10_000);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.role).toBe("admin");
  });
});
