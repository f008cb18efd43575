import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/**
 * A credential created while its membership is being removed, or while the session that asks for
 * it is being revoked, must not outlive that change: it would come back to life when the person
 * is added again, or keep a removed person's access. The change in progress is held open here in
 * a transaction of our own, the way a slow removal or password change holds it, and committed
 * once the login or key creation has reached the database.
 */
describe("credentials created while access is being taken away", () => {
  let app: TestApp;
  let owner: string;
  let holder: postgres.Sql;
  let watcher: postgres.Sql;

  beforeAll(async () => {
    app = await startApp();
    owner = await app.ownerToken();
    holder = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    watcher = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await holder?.end();
    await watcher?.end();
    await app?.stop();
  });

  const addMember = async (email: string) =>
    expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "password-123", role: "member" } })).status).toBe(201);
  const login = (email: string) => app.call("POST", "/auth/login", { body: { email, password: "password-123", orgSlug: "acme" } });

  /** Resolves once `call` has answered or some statement waits on a lock our transaction holds. */
  async function answeredOrWaiting(call: Promise<unknown>): Promise<"answered" | "waiting"> {
    let answered = false;
    void call.then(() => {
      answered = true;
    });
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (answered) return "answered";
      const [row] = await watcher<{ n: number }[]>`select count(*)::int as n from pg_locks where not granted`;
      if (row!.n > 0) return "waiting";
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error("neither answered nor waiting");
  }

  it("a login that overlaps the member's removal leaves no session behind", async () => {
    await addMember("kim@acme.test");
    let call: ReturnType<typeof login> | undefined;
    let seen = "";
    await holder.begin(async (tx) => {
      await tx`delete from identity.memberships m using identity.users u where u.id = m.user_id and lower(u.email) = 'kim@acme.test'`;
      call = login("kim@acme.test");
      seen = await answeredOrWaiting(call);
    });
    const res = await call!;
    expect({ seen, status: res.status }).toEqual({ seen: "waiting", status: 401 });
    const [live] = await watcher<{ n: number }[]>`
      select count(*)::int as n from identity.sessions s join identity.users u on u.id = s.user_id
      where lower(u.email) = 'kim@acme.test' and s.revoked_at is null`;
    expect(live!.n).toBe(0);
  });

  it("a key created with a session that is being revoked is not created", async () => {
    await addMember("lee@acme.test");
    const session = (await login("lee@acme.test")).body.accessToken as string;
    let call: ReturnType<typeof app.call> | undefined;
    let seen = "";
    await holder.begin(async (tx) => {
      await tx`update identity.sessions s set revoked_at = now() from identity.users u where u.id = s.user_id and lower(u.email) = 'lee@acme.test'`;
      call = app.call("POST", "/o/acme/api-keys", { token: session, body: { name: "late" } });
      seen = await answeredOrWaiting(call);
    });
    const res = await call!;
    expect({ seen, status: res.status }).toEqual({ seen: "waiting", status: 401 });
    const [keys] = await watcher<{ n: number }[]>`
      select count(*)::int as n from identity.api_keys k join identity.users u on u.id = k.user_id where lower(u.email) = 'lee@acme.test'`;
    expect(keys!.n).toBe(0);
  });

  /**
   * The removal of an admin, held open after it locked the admin's membership row (as
   * DELETE /o/{org}/members/{id} does), and a write that grants access sent meanwhile by that admin:
   * the write must see the removal and grant nothing.
   */
  async function removedWhile(email: string, write: (session: string) => Promise<{ status: number }>) {
    const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "password-123", role: "admin" } });
    expect(added.status).toBe(201);
    const session = (await login(email)).body.accessToken as string;
    let call: Promise<{ status: number }> | undefined;
    let seen = "";
    await holder.begin(async (tx) => {
      await tx`select 1 from identity.memberships where user_id = ${added.body.id} for update`;
      call = write(session);
      seen = await answeredOrWaiting(call);
      await tx`delete from identity.memberships where user_id = ${added.body.id}`;
    });
    return { seen, status: (await call!).status };
  }

  it("a member added by an admin whose removal is committing is not added", async () => {
    const result = await removedWhile("ana@acme.test", (session) =>
      app.call("POST", "/o/acme/members", { token: session, body: { email: "eve@acme.test", password: "password-123", role: "admin" } }),
    );
    expect(result).toEqual({ seen: "waiting", status: 401 });
    const [members] = await watcher<{ n: number }[]>`
      select count(*)::int as n from identity.memberships m join identity.users u on u.id = m.user_id where lower(u.email) = 'eve@acme.test'`;
    expect(members!.n).toBe(0);
    expect((await login("eve@acme.test")).status).toBe(401);
  });

  /** The organization's credential of `kind` as stored (its hash), or null when none was issued. */
  const storedCredential = async (kind: string) =>
    (await watcher<{ hash: Buffer | null }[]>`select (select hash from identity.org_credentials where kind = ${kind}) as hash`)[0]!.hash;

  it.each([
    ["an ingest token", "ingest-token", "ingest_token", "ike@acme.test"],
    ["a chat secret", "chat-secret", "chat_secret", "uma@acme.test"],
    ["an alert-router secret", "alertrouter-secret", "alertrouter_secret", "abe@acme.test"],
  ])("%s issued by an admin whose removal is committing is not issued", async (_, route, kind, admin) => {
    const before = await storedCredential(kind);
    const result = await removedWhile(admin, (session) => app.call("POST", `/o/acme/triggers/${route}`, { token: session }));
    expect(result).toEqual({ seen: "waiting", status: 401 });
    expect(await storedCredential(kind)).toEqual(before);
  });

  it("a role raised by an admin whose removal is committing is not raised", async () => {
    const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email: "raj@acme.test", password: "password-123", role: "member" } });
    expect(added.status).toBe(201);
    const result = await removedWhile("ivy@acme.test", (session) =>
      app.call("PATCH", `/o/acme/members/${added.body.id}`, { token: session, body: { role: "admin" } }),
    );
    expect(result).toEqual({ seen: "waiting", status: 401 });
    const [row] = await watcher<{ role: string }[]>`select role from identity.memberships where user_id = ${added.body.id}`;
    expect(row!.role).toBe("member");
  });

  it("a password set by an admin whose removal is committing is not set", async () => {
    const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email: "pat@acme.test", password: "password-123", role: "member" } });
    expect(added.status).toBe(201);
    const result = await removedWhile("oz@acme.test", (session) =>
      app.call("PUT", `/o/acme/members/${added.body.id}/password`, { token: session, body: { password: "taken-over-456" } }),
    );
    expect(result).toEqual({ seen: "waiting", status: 401 });
    expect((await login("pat@acme.test")).status).toBe(200);
    expect((await app.call("POST", "/auth/login", { body: { email: "pat@acme.test", password: "taken-over-456", orgSlug: "acme" } })).status).toBe(401);
  });
});
