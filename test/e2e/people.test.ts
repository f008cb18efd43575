import { readFileSync } from "node:fs";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { LAST_OWNER } from "../../services/identity/member-changes.js";
import { EVENTS } from "../../services/runtime/transport/events.js";
import { createNatsTransport } from "../../services/runtime/transport/nats-transport.js";
import { callApi, OWNER } from "../support/app.js";
import { startClusterApp } from "../support/cluster.js";
import { tapOutbox } from "../support/outbox-tap.js";

/**
 * A person's lifecycle in an organization (roles, removal, passwords, API keys) and the severity a
 * person sets, end to end over REST and Connect against the whole service as separate processes
 * over NATS with two gateway replicas: a change made through one replica is checked through the
 * other, on the very next request.
 */
const PASSWORD = "password-123";
const fixture = JSON.parse(readFileSync(new URL("../fixtures/datadog/custom-body-triggered.json", import.meta.url), "utf8"));

type Cluster = Awaited<ReturnType<typeof startClusterApp>>;
type Answer = Awaited<ReturnType<typeof callApi>>;

let app: Cluster;
let nc: NatsConnection;
let db: postgres.Sql;
let owner: string;
let admin: string;
let member: string;
let globexOwner: string;
let n = 0;
const unique = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${n++}`;

/** REST on replica `replica` (0 or 1). */
const rest = (replica: number, method: string, path: string, options: Parameters<typeof callApi>[3] = {}): Promise<Answer> =>
  callApi(app.gatewayUrls[replica]!, method, path, options);

/** Connect (or gRPC) clients on a replica, calling with `token`. */
function connectAs(replica: number, token: string | undefined, protocol: "connect" | "grpc" = "connect") {
  const bearer: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const baseUrl = app.gatewayUrls[replica]!;
  const transport =
    protocol === "grpc"
      ? createGrpcTransport({ baseUrl, interceptors: [bearer] })
      : createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [bearer] });
  return { identity: createClient(IdentityService, transport), incidents: createClient(IncidentsService, transport) };
}

/** The Connect code a call ends with, or "ok". */
async function codeOf(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "ok";
  } catch (err) {
    return Code[ConnectError.from(err).code]!;
  }
}

/** Logs in, waiting out a shed password check (429) as a client would. */
async function login(email: string, org = "acme", password = PASSWORD, replica = 0): Promise<Answer> {
  for (let attempt = 1; ; attempt++) {
    const res = await rest(replica, "POST", "/auth/login", { body: { email, password, orgSlug: org } });
    if (res.status !== 429 || attempt === 10) return res;
    await new Promise((r) => setTimeout(r, 1000 * Number(res.headers.get("retry-after") ?? 1)));
  }
}

async function session(email: string, org = "acme", password = PASSWORD): Promise<string> {
  const res = await login(email, org, password);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.accessToken as string;
}

/** Adds a member and returns its id and a session of its own. */
async function addMember(role: "owner" | "admin" | "member", options: { org?: string; by?: string; email?: string } = {}) {
  const org = options.org ?? "acme";
  const email = options.email ?? `${unique(role)}@people.test`;
  const res = await rest(0, "POST", `/o/${org}/members`, { token: options.by ?? owner, body: { email, password: PASSWORD, role } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { id: res.body.id as string, email, token: await session(email, org) };
}

async function auditEvents(org = "acme", token = owner): Promise<{ kind: string; actor: string; data: Record<string, unknown> }[]> {
  const res = await rest(1, "GET", `/o/${org}/audit-events?limit=1000`, { token });
  expect(res.status).toBe(200);
  return res.body.events;
}

/** Waits until `probe` answers something other than undefined. */
async function eventually<T>(probe: () => Promise<T | undefined>, ms = 15_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error("not observed in time");
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whether a credential is still accepted on each replica (GET /o/{org}/members). */
async function acceptedOn(token: string, org = "acme"): Promise<number[]> {
  return Promise.all([0, 1].map(async (replica) => (await rest(replica, "GET", `/o/${org}/members`, { token })).status));
}

beforeAll(async () => {
  app = await startClusterApp();
  nc = await connect({ servers: app.natsUrl! });
  db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  await tapOutbox(db, "incidents");
  owner = await app.ownerToken();
  admin = (await addMember("admin")).token;
  member = (await addMember("member")).token;
  // Two more organizations, through the bootstrap path the admin CLI uses: globex for the
  // cross-organization refusals, initech for the last-owner rule (one owner only).
  const identity = createClient(IdentityService, createNatsTransport(nc));
  await identity.bootstrap({ orgSlug: "globex", ownerEmail: "boss@globex.test", ownerPassword: PASSWORD });
  await identity.bootstrap({ orgSlug: "initech", ownerEmail: "boss@initech.test", ownerPassword: PASSWORD });
  globexOwner = await session("boss@globex.test", "globex");
}, 180_000);

afterAll(async () => {
  await db?.end();
  await nc?.close();
  await app?.stop();
});

describe("changing a role", () => {
  it("takes effect on the next request with the same session, on the other replica, and is audited", async () => {
    const m = await addMember("member");
    expect((await rest(1, "GET", "/o/acme/audit-events", { token: m.token })).status).toBe(403);

    const promoted = await rest(0, "PATCH", `/o/acme/members/${m.id}`, { token: admin, body: { role: "admin" } });
    expect(promoted.status).toBe(200);
    expect(promoted.body).toEqual({ id: m.id, email: m.email, role: "admin" });
    expect((await rest(1, "GET", "/o/acme/audit-events", { token: m.token })).status).toBe(200);

    expect((await rest(0, "PATCH", `/o/acme/members/${m.id}`, { token: owner, body: { role: "member" } })).status).toBe(200);
    expect((await rest(1, "GET", "/o/acme/audit-events", { token: m.token })).status).toBe(403);

    const changes = (await auditEvents()).filter((e) => e.kind === "member.role_changed" && e.data.id === m.id);
    expect(changes.map((e) => [e.actor, e.data.from, e.data.to])).toEqual([
      [OWNER.email, "admin", "member"],
      [expect.stringMatching(/^admin-/), "member", "admin"],
    ]);
  });

  it("refuses, over REST: a member, a role above one's own, an admin on an owner, a bad role, an unknown or foreign member, another organization, no credential", async () => {
    const m = await addMember("member");
    const anotherOwner = await addMember("owner");
    const foreign = await addMember("member", { org: "globex", by: globexOwner });
    const patch = (token: string | undefined, id: string, role: string, org = "acme") => rest(1, "PATCH", `/o/${org}/members/${id}`, { token, body: { role } });

    expect((await patch(member, m.id, "admin")).status).toBe(403);
    const above = await patch(admin, m.id, "owner");
    expect(above.status).toBe(403);
    expect(above.body).toEqual({ error: "you may not give a role above your own (admin)" });
    const onOwner = await patch(admin, anotherOwner.id, "member");
    expect(onOwner.status).toBe(403);
    expect(onOwner.body).toEqual({ error: "only an owner may change the role of an owner" });
    expect((await patch(owner, m.id, "superuser")).status).toBe(400);
    expect((await patch(owner, "00000000-0000-4000-8000-000000000000", "admin")).status).toBe(404);
    expect((await patch(owner, "not-a-uuid", "admin")).status).toBe(404);
    // Another organization's member is not found here, and its owner may not act here.
    expect((await patch(owner, foreign.id, "admin")).status).toBe(404);
    expect((await patch(globexOwner, m.id, "admin")).status).toBe(403);
    expect((await patch(undefined, m.id, "admin")).status).toBe(401);
    // Nothing changed.
    const roles = (await rest(0, "GET", "/o/acme/members", { token: member })).body.members as { id: string; role: string }[];
    expect(roles.find((r) => r.id === m.id)?.role).toBe("member");
    expect(roles.find((r) => r.id === anotherOwner.id)?.role).toBe("owner");
  });

  it("works and refuses the same over Connect", async () => {
    const m = await addMember("member");
    const asAdmin = connectAs(1, admin).identity;
    expect(await asAdmin.updateMember({ org: "acme", id: m.id, role: "admin" })).toMatchObject({ id: m.id, email: m.email, role: "admin" });
    expect(await codeOf(connectAs(1, m.token).identity.listAuditEvents({ org: "acme" }))).toBe("ok");
    expect(await codeOf(asAdmin.updateMember({ org: "acme", id: m.id, role: "owner" }))).toBe("PermissionDenied");
    expect(await codeOf(connectAs(0, member).identity.updateMember({ org: "acme", id: m.id, role: "member" }))).toBe("PermissionDenied");
    expect(await codeOf(asAdmin.updateMember({ org: "acme", id: m.id, role: "" }))).toBe("InvalidArgument");
    expect(await codeOf(asAdmin.updateMember({ org: "acme", id: "00000000-0000-4000-8000-000000000000", role: "member" }))).toBe("NotFound");
    expect(await codeOf(connectAs(0, globexOwner).identity.updateMember({ org: "acme", id: m.id, role: "member" }))).toBe("PermissionDenied");
    expect(await codeOf(connectAs(0, undefined).identity.updateMember({ org: "acme", id: m.id, role: "member" }))).toBe("Unauthenticated");
  });
});

describe("the last owner", () => {
  it("cannot be demoted or removed (409), over REST and Connect; one of two owners can", async () => {
    const boss = await session("boss@initech.test", "initech");
    const [me] = (await rest(0, "GET", "/o/initech/members", { token: boss })).body.members as { id: string }[];
    const demote = await rest(0, "PATCH", `/o/initech/members/${me!.id}`, { token: boss, body: { role: "admin" } });
    expect(demote.status).toBe(409);
    expect(demote.body).toEqual({ error: LAST_OWNER });
    const remove = await rest(1, "DELETE", `/o/initech/members/${me!.id}`, { token: boss });
    expect(remove.status).toBe(409);
    expect(remove.body).toEqual({ error: LAST_OWNER });
    expect(await codeOf(connectAs(1, boss).identity.removeMember({ org: "initech", id: me!.id }))).toBe("FailedPrecondition");

    // Two owners demoting each other at once: one wins; the other, an admin by then, may no
    // longer change an owner (403). One owner is left.
    const second = await addMember("owner", { org: "initech", by: boss });
    const [a, b] = await Promise.all([
      rest(0, "PATCH", `/o/initech/members/${second.id}`, { token: boss, body: { role: "admin" } }),
      rest(1, "PATCH", `/o/initech/members/${me!.id}`, { token: second.token, body: { role: "admin" } }),
    ]);
    expect([a.status, b.status].sort()).toEqual([200, 403]);
    const owners = ((await rest(0, "GET", "/o/initech/members", { token: a.status === 200 ? boss : second.token })).body.members as { role: string }[]).filter(
      (m) => m.role === "owner",
    );
    expect(owners).toHaveLength(1);
  });
});

describe("removing a member", () => {
  it("refuses their session and API key on the very next request on every replica; their other organization is untouched", async () => {
    const email = `${unique("leaver")}@people.test`;
    const acme = await addMember("member", { email });
    await addMember("member", { org: "globex", by: globexOwner, email });
    const globexSession = await session(email, "globex");
    const key = (await rest(0, "POST", "/o/acme/api-keys", { token: acme.token, body: { name: "laptop" } })).body.key as string;
    expect(await acceptedOn(acme.token)).toEqual([200, 200]);
    expect(await acceptedOn(key)).toEqual([200, 200]);

    expect((await rest(0, "DELETE", `/o/acme/members/${acme.id}`, { token: admin })).status).toBe(204);
    expect(await acceptedOn(acme.token)).toEqual([401, 401]);
    expect(await acceptedOn(key)).toEqual([401, 401]);
    expect(await codeOf(connectAs(1, key).incidents.listIncidents({ org: "acme" }))).toBe("Unauthenticated");
    expect((await login(email, "acme")).status).toBe(401);
    const members = (await rest(1, "GET", "/o/acme/members", { token: member })).body.members as { id: string }[];
    expect(members.map((m) => m.id)).not.toContain(acme.id);

    expect(await acceptedOn(globexSession, "globex")).toEqual([200, 200]);
    expect((await login(email, "globex")).status).toBe(200);

    // Adding the person again brings none of the old credentials back.
    await addMember("member", { email });
    expect(await acceptedOn(acme.token)).toEqual([401, 401]);
    expect(await acceptedOn(key)).toEqual([401, 401]);

    const removed = (await auditEvents()).find((e) => e.kind === "member.removed" && e.data.id === acme.id);
    expect(removed).toMatchObject({ actor: expect.stringMatching(/^admin-/), data: { email, role: "member", sessionsRevoked: 1, apiKeysRevoked: 1 } });
    expect(JSON.stringify(removed)).not.toContain(key);
    expect(JSON.stringify(removed)).not.toContain(acme.token);
  });

  it("refuses, over REST: a member, an admin on an owner, an unknown or foreign member, another organization, no credential", async () => {
    const m = await addMember("member");
    const anotherOwner = await addMember("owner");
    const foreign = await addMember("member", { org: "globex", by: globexOwner });
    const del = (token: string | undefined, id: string) => rest(1, "DELETE", `/o/acme/members/${id}`, { token });
    expect((await del(member, m.id)).status).toBe(403);
    const onOwner = await del(admin, anotherOwner.id);
    expect(onOwner.status).toBe(403);
    expect(onOwner.body).toEqual({ error: "only an owner may remove an owner" });
    expect((await del(owner, "00000000-0000-4000-8000-000000000000")).status).toBe(404);
    expect((await del(owner, foreign.id)).status).toBe(404);
    expect((await del(globexOwner, m.id)).status).toBe(403);
    expect((await del(undefined, m.id)).status).toBe(401);
    expect(await acceptedOn(m.token)).toEqual([200, 200]);
    expect(await acceptedOn(foreign.token, "globex")).toEqual([200, 200]);
    // An owner may remove an owner who is not the last.
    expect((await del(owner, anotherOwner.id)).status).toBe(204);
    expect(await acceptedOn(anotherOwner.token)).toEqual([401, 401]);
  });

  it("lets only one of two admins removing each other at once go through", async () => {
    const a = await addMember("admin");
    const b = await addMember("admin");
    const answers = await Promise.all([
      rest(0, "DELETE", `/o/acme/members/${b.id}`, { token: a.token }),
      rest(1, "DELETE", `/o/acme/members/${a.id}`, { token: b.token }),
    ]);
    expect(answers.map((r) => r.status).sort()).toEqual([204, 401]);
    const left = ((await rest(0, "GET", "/o/acme/members", { token: owner })).body.members as { id: string }[]).filter((m) => m.id === a.id || m.id === b.id);
    expect(left).toHaveLength(1);
  });

  it("works and refuses the same over Connect", async () => {
    const m = await addMember("member");
    const anotherOwner = await addMember("owner");
    expect(await codeOf(connectAs(0, member).identity.removeMember({ org: "acme", id: m.id }))).toBe("PermissionDenied");
    expect(await codeOf(connectAs(0, admin).identity.removeMember({ org: "acme", id: anotherOwner.id }))).toBe("PermissionDenied");
    expect(await codeOf(connectAs(0, globexOwner).identity.removeMember({ org: "acme", id: m.id }))).toBe("PermissionDenied");
    expect(await codeOf(connectAs(0, admin).identity.removeMember({ org: "acme", id: "00000000-0000-4000-8000-000000000000" }))).toBe("NotFound");
    expect(await codeOf(connectAs(0, undefined).identity.removeMember({ org: "acme", id: m.id }))).toBe("Unauthenticated");
    expect(await codeOf(connectAs(0, admin).identity.removeMember({ org: "acme", id: m.id }))).toBe("ok");
    expect(await codeOf(connectAs(1, m.token).identity.listMembers({ org: "acme" }))).toBe("Unauthenticated");
  });
});

describe("setting a member's password", () => {
  it("ends the member's sessions; the new password logs in and the old does not; audited without the password", async () => {
    const m = await addMember("member");
    const other = await session(m.email);
    const newPassword = "a new password 1";
    expect((await rest(0, "PUT", `/o/acme/members/${m.id}/password`, { token: admin, body: { password: newPassword } })).status).toBe(204);
    expect(await acceptedOn(m.token)).toEqual([401, 401]);
    expect(await acceptedOn(other)).toEqual([401, 401]);
    expect((await login(m.email)).status).toBe(401);
    expect((await login(m.email, "acme", newPassword)).status).toBe(200);
    const set = (await auditEvents()).find((e) => e.kind === "member.password_set" && e.data.id === m.id);
    expect(set).toMatchObject({ actor: expect.stringMatching(/^admin-/), data: { email: m.email, sessionsRevoked: 2 } });
    expect(JSON.stringify(set)).not.toContain(newPassword);
  });

  it("sets an owner's password only by an owner, and refuses the rest, over REST and Connect", async () => {
    const anotherOwner = await addMember("owner");
    const m = await addMember("member");
    const foreign = await addMember("member", { org: "globex", by: globexOwner });
    const put = (token: string | undefined, id: string, password = "long enough 1") =>
      rest(1, "PUT", `/o/acme/members/${id}/password`, { token, body: { password } });
    const onOwner = await put(admin, anotherOwner.id);
    expect(onOwner.status).toBe(403);
    expect(onOwner.body).toEqual({ error: "only an owner may set the password of an owner" });
    expect((await put(member, m.id)).status).toBe(403);
    const short = await put(admin, m.id, "short");
    expect(short.status).toBe(400);
    expect(short.body).toEqual({ error: "password must be at least 8 characters" });
    expect((await put(admin, "00000000-0000-4000-8000-000000000000")).status).toBe(404);
    expect((await put(admin, foreign.id)).status).toBe(404);
    expect((await put(globexOwner, m.id)).status).toBe(403);
    expect((await put(undefined, m.id)).status).toBe(401);
    expect(await acceptedOn(anotherOwner.token)).toEqual([200, 200]);
    expect(await acceptedOn(m.token)).toEqual([200, 200]);

    expect(await codeOf(connectAs(0, admin).identity.setMemberPassword({ org: "acme", id: anotherOwner.id, password: "long enough 1" }))).toBe(
      "PermissionDenied",
    );
    expect(await codeOf(connectAs(0, owner).identity.setMemberPassword({ org: "acme", id: anotherOwner.id, password: "long enough 1" }))).toBe("ok");
    expect(await acceptedOn(anotherOwner.token)).toEqual([401, 401]);
    expect((await login(anotherOwner.email, "acme", "long enough 1")).status).toBe(200);
  });
});

describe("changing one's own password", () => {
  it("needs the current password, ends the other sessions and keeps this one, over REST", async () => {
    const m = await addMember("member");
    const other = await session(m.email);
    const change = (body: object) => rest(1, "PUT", "/o/acme/me/password", { token: m.token, body });
    const wrong = await change({ currentPassword: "not it at all", newPassword: "a better one 1" });
    expect(wrong.status).toBe(403);
    expect(wrong.body).toEqual({ error: "currentPassword is not your current password" });
    expect((await change({ currentPassword: PASSWORD, newPassword: "short" })).status).toBe(400);
    expect((await rest(1, "PUT", "/o/acme/me/password", { body: { currentPassword: PASSWORD, newPassword: "a better one 1" } })).status).toBe(401);
    expect(await acceptedOn(other)).toEqual([200, 200]);

    expect((await change({ currentPassword: PASSWORD, newPassword: "a better one 1" })).status).toBe(204);
    expect(await acceptedOn(m.token)).toEqual([200, 200]);
    expect(await acceptedOn(other)).toEqual([401, 401]);
    expect((await login(m.email)).status).toBe(401);
    expect((await login(m.email, "acme", "a better one 1")).status).toBe(200);
    const set = (await auditEvents()).find((e) => e.kind === "member.password_set" && e.data.id === m.id);
    expect(set).toMatchObject({ actor: m.email, data: { own: true, sessionsRevoked: 1 } });
    expect(JSON.stringify(set)).not.toContain("a better one 1");
  });

  it("the same over Connect", async () => {
    const m = await addMember("member");
    const me = connectAs(0, m.token).identity;
    expect(await codeOf(me.changeOwnPassword({ org: "acme", currentPassword: "wrong password", newPassword: "another one 1" }))).toBe("PermissionDenied");
    expect(await codeOf(me.changeOwnPassword({ org: "acme", currentPassword: PASSWORD, newPassword: "x" }))).toBe("InvalidArgument");
    expect(await codeOf(connectAs(0, globexOwner).identity.changeOwnPassword({ org: "acme", currentPassword: PASSWORD, newPassword: "another one 1" }))).toBe(
      "PermissionDenied",
    );
    expect(await codeOf(me.changeOwnPassword({ org: "acme", currentPassword: PASSWORD, newPassword: "another one 1" }))).toBe("ok");
    expect((await login(m.email, "acme", "another one 1")).status).toBe(200);
  });
});

describe("API keys", () => {
  it("lists a member's own keys and every key for an admin, never the key itself", async () => {
    const m = await addMember("member");
    const mine = await rest(0, "POST", "/o/acme/api-keys", { token: m.token, body: { name: "mine" } });
    const adminKey = await rest(0, "POST", "/o/acme/api-keys", { token: admin, body: { name: "admin's" } });
    expect(mine.status).toBe(201);

    const asMember = await rest(1, "GET", "/o/acme/api-keys", { token: m.token });
    expect(asMember.status).toBe(200);
    expect(asMember.body).toEqual({ apiKeys: [{ id: mine.body.id, name: "mine", email: m.email, createdAt: expect.any(String), lastUsedAt: null }] });
    const asAdmin = await rest(1, "GET", "/o/acme/api-keys", { token: admin });
    const ids = (asAdmin.body.apiKeys as { id: string }[]).map((k) => k.id);
    expect(ids).toEqual(expect.arrayContaining([mine.body.id, adminKey.body.id]));
    for (const text of [JSON.stringify(asMember.body), JSON.stringify(asAdmin.body)]) {
      expect(text).not.toContain(mine.body.key);
      expect(text).not.toContain(adminKey.body.key);
    }
    const overConnect = await connectAs(0, m.token).identity.listApiKeys({ org: "acme" });
    expect(overConnect.apiKeys.map((k) => k.id)).toEqual([mine.body.id]);
    // Another organization sees none of them.
    const globex = await rest(0, "GET", "/o/globex/api-keys", { token: globexOwner });
    expect((globex.body.apiKeys as { id: string }[]).map((k) => k.id)).not.toContain(mine.body.id);
    expect((await rest(0, "GET", "/o/acme/api-keys", { token: globexOwner })).status).toBe(403);
    expect((await rest(0, "GET", "/o/acme/api-keys")).status).toBe(401);
  });

  it("cannot mint keys: creating one needs a session (REST and Connect)", async () => {
    const key = (await rest(0, "POST", "/o/acme/api-keys", { token: owner, body: { name: "parent" } })).body.key as string;
    const child = await rest(1, "POST", "/o/acme/api-keys", { token: key, body: { name: "child" } });
    expect(child.status).toBe(403);
    expect(child.body.error).toMatch(/^changing credentials needs a signed-in session, not an API key: log in/);
    expect(await codeOf(connectAs(0, key).identity.createApiKey({ org: "acme", name: "child" }))).toBe("PermissionDenied");
  });

  it("revokes one's own key, any key for an admin, never another's for a member; refused at once on every replica; audited", async () => {
    const m = await addMember("member");
    const other = await addMember("member");
    const own = (await rest(0, "POST", "/o/acme/api-keys", { token: m.token, body: { name: "own" } })).body;
    const others = (await rest(0, "POST", "/o/acme/api-keys", { token: other.token, body: { name: "others" } })).body;
    const foreign = (await rest(0, "POST", "/o/globex/api-keys", { token: globexOwner, body: { name: "globex" } })).body;

    expect((await rest(1, "DELETE", `/o/acme/api-keys/${others.id}`, { token: m.token })).status).toBe(404);
    expect((await rest(1, "DELETE", `/o/acme/api-keys/${foreign.id}`, { token: admin })).status).toBe(404);
    expect((await rest(1, "DELETE", `/o/acme/api-keys/${own.id}`, { token: globexOwner })).status).toBe(403);
    expect((await rest(1, "DELETE", `/o/acme/api-keys/${own.id}`)).status).toBe(401);
    expect(await acceptedOn(others.key)).toEqual([200, 200]);

    expect((await rest(0, "DELETE", `/o/acme/api-keys/${own.id}`, { token: m.token })).status).toBe(204);
    expect(await acceptedOn(own.key)).toEqual([401, 401]);
    expect(await codeOf(connectAs(0, admin).identity.deleteApiKey({ org: "acme", id: others.id }))).toBe("ok");
    expect(await acceptedOn(others.key)).toEqual([401, 401]);
    expect(await acceptedOn(foreign.key, "globex")).toEqual([200, 200]);
    expect((await rest(0, "GET", "/o/acme/api-keys", { token: admin })).body.apiKeys.map((k: { id: string }) => k.id)).not.toContain(others.id);

    const revoked = (await auditEvents()).filter((e) => e.kind === "api_key.revoked" && (e.data.id === own.id || e.data.id === others.id));
    expect(revoked.map((e) => [e.actor, e.data.owner])).toEqual([
      [expect.stringMatching(/^admin-/), other.email],
      [m.email, m.email],
    ]);
    expect(JSON.stringify(revoked)).not.toContain(own.key);
  });

  it("keeps lastUsedAt to the minute: written once on use, not again within the minute", async () => {
    const { id, key } = (await rest(0, "POST", "/o/acme/api-keys", { token: owner, body: { name: "used" } })).body;
    const lastUsed = async () =>
      ((await rest(0, "GET", "/o/acme/api-keys", { token: owner })).body.apiKeys as { id: string; lastUsedAt: string | null }[]).find((k) => k.id === id)!
        .lastUsedAt;
    expect(await lastUsed()).toBeNull();
    expect((await rest(1, "GET", "/o/acme/incidents", { token: key })).status).toBe(200);
    const first = await eventually(async () => (await lastUsed()) ?? undefined);
    await Promise.all([0, 1, 0, 1].map((replica) => rest(replica, "GET", "/o/acme/incidents", { token: key })));
    await new Promise((r) => setTimeout(r, 500));
    expect(await lastUsed()).toBe(first);
  });
});

describe("changing an incident's severity", () => {
  let ingest: string;
  let m: { id: string; email: string; token: string };

  beforeAll(async () => {
    ingest = (await rest(0, "POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
    m = await addMember("member");
  });

  const open = async () => {
    const res = await rest(0, "POST", "/triggers", { token: ingest, body: { ...fixture, alert_id: unique("alert"), event_id: unique("event") } });
    expect(res.status).toBe(201);
    return res.body.incidentId as string;
  };

  it("is a member's to change: timeline severity_changed {from, to, actor}, an event, an audit record; a later repeat keeps it", async () => {
    const alertId = unique("alert");
    const opened = await rest(0, "POST", "/triggers", { token: ingest, body: { ...fixture, alert_id: alertId, event_id: unique("event") } });
    expect(opened.status).toBe(201);
    const id = opened.body.incidentId as string;
    expect((await rest(1, "GET", `/o/acme/incidents/${id}`, { token: m.token })).body.severity).toBe("sev2");

    const changed = await rest(1, "PATCH", `/o/acme/incidents/${id}`, { token: m.token, body: { severity: "sev1" } });
    expect(changed.status).toBe(200);
    expect(changed.body.severity).toBe("sev1");
    expect(changed.body.timeline.at(-1)).toMatchObject({ kind: "severity_changed", data: { from: "sev2", to: "sev1", actor: m.email } });

    // The same value again records nothing.
    const again = await rest(0, "PATCH", `/o/acme/incidents/${id}`, { token: m.token, body: { severity: "sev1" } });
    expect(again.status).toBe(200);
    expect(again.body.timeline.filter((e: { kind: string }) => e.kind === "severity_changed")).toHaveLength(1);

    const repeat = await rest(0, "POST", "/triggers", { token: ingest, body: { ...fixture, alert_id: alertId, event_id: unique("event") } });
    expect(repeat.status).toBe(200);
    expect(repeat.body.incidentId).toBe(id);
    const after = (await rest(1, "GET", `/o/acme/incidents/${id}`, { token: m.token })).body;
    expect(after.severity).toBe("sev1");
    expect(after.timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened", "severity_changed", "repeat"]);

    const [published] = await db<
      { payload: Buffer }[]
    >`select payload from incidents.outbox_tap where subject = ${EVENTS.severityChanged.subject} order by seq`.then((rows) =>
      rows.map((r) => fromBinary(EVENTS.severityChanged.schema, r.payload)).filter((e) => e.incidentId === id),
    );
    expect(published).toMatchObject({ incidentId: id, from: "sev2", to: "sev1", actor: m.email });
    const audited = await eventually(async () => (await auditEvents()).find((e) => e.kind === "incident.severity_changed" && e.data.incidentId === id));
    expect(audited).toMatchObject({ actor: m.email, data: { from: "sev2", to: "sev1" } });
  });

  it("refuses, over REST: a value other than sev1..sev4, an unknown or foreign incident, another organization, no credential, an archived incident", async () => {
    const id = await open();
    const patch = (token: string | undefined, body: unknown, incident = id, org = "acme") =>
      rest(1, "PATCH", `/o/${org}/incidents/${incident}`, { token, body });
    for (const severity of ["sev5", "SEV1", "", "critical"]) {
      const res = await patch(m.token, { severity });
      expect({ severity, status: res.status }).toEqual({ severity, status: 400 });
      expect(res.body).toEqual({ error: "severity must be one of sev1, sev2, sev3, sev4" });
    }
    expect((await patch(m.token, {})).status).toBe(400);
    expect((await patch(m.token, { severity: "sev1" }, "00000000-0000-4000-8000-000000000000")).status).toBe(404);
    expect((await patch(globexOwner, { severity: "sev1" }, id, "globex")).status).toBe(404);
    expect((await patch(globexOwner, { severity: "sev1" })).status).toBe(403);
    expect((await patch(undefined, { severity: "sev1" })).status).toBe(401);
    expect((await rest(0, "GET", `/o/acme/incidents/${id}`, { token: m.token })).body.severity).toBe("sev2");

    expect((await rest(0, "POST", `/o/acme/incidents/${id}/archive`, { token: m.token })).status).toBe(200);
    const archived = await patch(m.token, { severity: "sev4" });
    expect(archived.status).toBe(409);
    expect(archived.body).toEqual({ error: "the incident is archived; its severity no longer changes" });
  });

  it("works and refuses the same over Connect", async () => {
    const id = await open();
    const incidents = connectAs(0, m.token).incidents;
    const changed = await incidents.updateIncident({ org: "acme", id, severity: "sev4" });
    expect(changed.severity).toBe("sev4");
    expect(changed.timeline.at(-1)?.kind).toBe("severity_changed");
    expect(await codeOf(incidents.updateIncident({ org: "acme", id, severity: "sev0" }))).toBe("InvalidArgument");
    expect(await codeOf(incidents.updateIncident({ org: "acme", id: "00000000-0000-4000-8000-000000000000", severity: "sev1" }))).toBe("NotFound");
    expect(await codeOf(connectAs(1, globexOwner).incidents.updateIncident({ org: "acme", id, severity: "sev1" }))).toBe("PermissionDenied");
    expect(await codeOf(connectAs(1, undefined).incidents.updateIncident({ org: "acme", id, severity: "sev1" }))).toBe("Unauthenticated");
  });
});

describe("over gRPC", () => {
  it("serves the same methods with the same answers and refusals", async () => {
    const m = await addMember("member");
    const asOwner = connectAs(1, owner, "grpc");
    const keys = await connectAs(0, m.token, "grpc").identity.listApiKeys({ org: "acme" });
    expect(keys.apiKeys).toEqual([]);
    expect(await asOwner.identity.updateMember({ org: "acme", id: m.id, role: "admin" })).toMatchObject({ role: "admin" });
    expect(await codeOf(connectAs(0, m.token, "grpc").identity.updateMember({ org: "acme", id: m.id, role: "owner" }))).toBe("PermissionDenied");
    const key = (await rest(0, "POST", "/o/acme/api-keys", { token: m.token, body: { name: "grpc" } })).body.key as string;
    expect(await codeOf(connectAs(0, key, "grpc").identity.createApiKey({ org: "acme", name: "child" }))).toBe("PermissionDenied");
    expect(await codeOf(connectAs(0, m.token, "grpc").incidents.updateIncident({ org: "acme", id: m.id, severity: "sev9" }))).toBe("InvalidArgument");
    expect(await codeOf(asOwner.identity.removeMember({ org: "acme", id: m.id }))).toBe("ok");
    expect(await codeOf(connectAs(1, key, "grpc").identity.listMembers({ org: "acme" }))).toBe("Unauthenticated");
    expect(await codeOf(connectAs(0, m.token, "grpc").identity.listMembers({ org: "acme" }))).toBe("Unauthenticated");
  });
});
