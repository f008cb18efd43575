import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { freshDatabase, OWNER, startApp, type TestApp } from "../support/app.js";

/**
 * PASSWORD_SCRYPT_N through the service: new hashes are stored with the cost it sets, and after a
 * restart with another cost the hashes made before still log in and are remade at that cost.
 */
describe("PASSWORD_SCRYPT_N", () => {
  const apps: TestApp[] = [];
  let database: Awaited<ReturnType<typeof freshDatabase>> | undefined;
  let db: postgres.Sql | undefined;

  afterAll(async () => {
    await db?.end();
    for (const app of apps.reverse()) await app.stop();
    await database?.drop();
  });

  const storedHash = async (email: string) => {
    const [row] = await db!<{ password_hash: string }[]>`
      select password_hash from identity.memberships where user_id = (select id from identity.users where email = ${email})`;
    return row!.password_hash;
  };
  const login = (app: TestApp, email: string, password: string) =>
    app.call("POST", "/auth/login", { body: { email, password, orgSlug: OWNER.org }, headers: { "x-forwarded-for": "192.0.2.10" } });

  it("stores new hashes at the cost it sets, and remakes older ones at the next login after a change", async () => {
    database = await freshDatabase({ migrated: true });
    const first = await startApp({ databaseUrl: database.url, env: { PASSWORD_SCRYPT_N: "16384", TRUSTED_PROXY_CIDRS: "127.0.0.1/32" } });
    apps.push(first);
    db = postgres(database.url, { max: 1, onnotice: () => {} });
    const owner = await first.ownerToken();
    const added = await first.call("POST", `/o/${OWNER.org}/members`, {
      token: owner,
      body: { email: "cost@acme.test", password: "a long enough password", role: "member" },
    });
    expect(added.status, JSON.stringify(added.body)).toBe(201);
    expect(await storedHash(OWNER.email)).toMatch(/^scrypt\$16384\$8\$1\$/);
    expect(await storedHash("cost@acme.test")).toMatch(/^scrypt\$16384\$8\$1\$/);
    await first.stop();
    apps.pop();

    // The same database after a restart at a higher cost.
    const second = await startApp({ databaseUrl: database.url, env: { PASSWORD_SCRYPT_N: "32768", TRUSTED_PROXY_CIDRS: "127.0.0.1/32" } });
    apps.push(second);
    const res = await login(second, "cost@acme.test", "a long enough password");
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await storedHash("cost@acme.test")).toMatch(/^scrypt\$32768\$8\$1\$/);
    expect((await login(second, "cost@acme.test", "a long enough password")).status).toBe(200);
    expect((await login(second, "cost@acme.test", "not the password")).status).toBe(401);
  });
});
