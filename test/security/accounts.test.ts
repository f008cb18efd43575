import { createClient } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { migrations as identityMigrations } from "../../services/identity/migrations.js";
import { hashPassword } from "../../services/identity/passwords.js";
import { migrate } from "../../services/runtime/data/migrations.js";
import { freshDatabase, startApp, type TestApp } from "../support/app.js";

/**
 * Users are shared between organizations, but a password belongs to one membership: an admin of
 * one organization cannot choose the password another organization's membership logs in with,
 * nor learn that an email is a member somewhere else.
 */
describe("accounts across organizations", () => {
  let app: TestApp;
  let acmeOwner: string;
  let globexOwner: string;

  const login = (email: string, password: string, orgSlug: string) => app.call("POST", "/auth/login", { body: { email, password, orgSlug } });

  beforeAll(async () => {
    app = await startApp();
    acmeOwner = await app.ownerToken();
    await createClient(IdentityService, app.process.transport).bootstrap({
      orgSlug: "globex",
      ownerEmail: "boss@globex.test",
      ownerPassword: "globex-owner-pass",
    });
    globexOwner = (await login("boss@globex.test", "globex-owner-pass", "globex")).body.accessToken;
  });
  afterAll(async () => {
    await app?.stop();
  });

  it("an admin who adds an email first cannot log in to another organization that adds it later", async () => {
    // The attacker, admin of acme, adds the victim's address with a password of their choosing.
    const planted = await app.call("POST", "/o/acme/members", {
      token: acmeOwner,
      body: { email: "victim@corp.test", password: "attacker-chosen", role: "member" },
    });
    expect(planted.status).toBe(201);
    // globex later adds the same person as its admin, with the password it gave them.
    const added = await app.call("POST", "/o/globex/members", {
      token: globexOwner,
      body: { email: "Victim@corp.test", password: "victims-own-pass", role: "admin" },
    });
    expect(added.status).toBe(201);
    expect((await login("victim@corp.test", "attacker-chosen", "globex")).status).toBe(401);
    const own = await login("victim@corp.test", "victims-own-pass", "globex");
    expect(own.status).toBe(200);
    // Each membership keeps its own password.
    expect((await login("victim@corp.test", "victims-own-pass", "acme")).status).toBe(401);
    expect((await login("victim@corp.test", "attacker-chosen", "acme")).status).toBe(200);
    const members = await app.call("GET", "/o/globex/members", { token: own.body.accessToken });
    expect(members.status).toBe(200);
    expect(members.body.members.find((m: { email: string }) => m.email.toLowerCase() === "victim@corp.test").role).toBe("admin");
  });

  it("answers the same whether or not the email is a member of another organization", async () => {
    await app.call("POST", "/o/acme/members", { token: acmeOwner, body: { email: "known@corp.test", password: "password-123", role: "member" } });
    // A short password is refused for a known and an unknown email alike.
    const knownShort = await app.call("POST", "/o/globex/members", { token: globexOwner, body: { email: "known@corp.test", password: "x", role: "member" } });
    const unknownShort = await app.call("POST", "/o/globex/members", {
      token: globexOwner,
      body: { email: "unknown@corp.test", password: "x", role: "member" },
    });
    expect(knownShort.status).toBe(400);
    expect(unknownShort.status).toBe(400);
    expect(knownShort.body).toEqual(unknownShort.body);
    const known = await app.call("POST", "/o/globex/members", {
      token: globexOwner,
      body: { email: "known@corp.test", password: "password-456", role: "member" },
    });
    const unknown = await app.call("POST", "/o/globex/members", {
      token: globexOwner,
      body: { email: "unknown@corp.test", password: "password-456", role: "member" },
    });
    expect(known.status).toBe(201);
    expect(unknown.status).toBe(201);
    expect(Object.keys(known.body).sort()).toEqual(Object.keys(unknown.body).sort());
    expect(known.body.email).toBe("known@corp.test");
  });

  it("keeps existing memberships' passwords working through the migration", async () => {
    const database = await freshDatabase();
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    let old: TestApp | undefined;
    try {
      await migrate(
        sql,
        "identity",
        identityMigrations.filter((m) => m.id <= 2),
      );
      const hash = await hashPassword("old-password-1");
      const [org] = await sql<{ id: string }[]>`insert into identity.organizations (slug) values ('initech') returning id`;
      const [user] = await sql<{ id: string }[]>`insert into identity.users (email, password_hash) values ('peter@initech.test', ${hash}) returning id`;
      await sql`insert into identity.memberships (org_id, user_id, role) values (${org!.id}, ${user!.id}, 'owner')`;
      old = await startApp({ databaseUrl: database.url });
      expect((await old.call("POST", "/auth/login", { body: { email: "peter@initech.test", password: "old-password-1", orgSlug: "initech" } })).status).toBe(
        200,
      );
      const [row] = await sql<{ users_hash: string | null }[]>`select password_hash as users_hash from identity.users where email = 'peter@initech.test'`;
      expect(row!.users_hash).toBeNull();
    } finally {
      await old?.process.stop();
      await sql.end();
      await database.drop();
    }
  });
});
