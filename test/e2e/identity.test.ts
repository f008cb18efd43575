import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { createNatsTransport } from "../../services/runtime/transport/nats-transport.js";
import { callApi, OWNER, startApp, type TestApp } from "../support/app.js";
import { startClusterApp } from "../support/cluster.js";

type Mode = "one process" | "separate processes over NATS";
const modes: Mode[] = ["one process", "separate processes over NATS"];

describe.each(modes)("identity and access (%s)", (mode) => {
  let app: TestApp;
  let nc: NatsConnection | undefined;
  let internal: Transport;
  let owner: string;
  let admin: string;
  let member: string;
  let otherAdmin: string;

  beforeAll(async () => {
    if (mode === "one process") {
      app = await startApp();
      internal = app.process.transport;
    } else {
      app = await startClusterApp();
      nc = await connect({ servers: app.natsUrl! });
      internal = createNatsTransport(nc);
    }
    owner = await app.ownerToken();
    for (const [email, role] of [
      ["admin@acme.test", "admin"],
      ["member@acme.test", "member"],
    ] as const) {
      const res = await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "password-123", role } });
      expect(res.status).toBe(201);
    }
    const login = async (email: string, orgSlug = "acme") =>
      (await app.call("POST", "/auth/login", { body: { email, password: "password-123", orgSlug } })).body.accessToken as string;
    admin = await login("admin@acme.test");
    member = await login("member@acme.test");
    // A second organization with its own admin.
    await createClient(IdentityService, internal).bootstrap({ orgSlug: "globex", ownerEmail: "boss@globex.test", ownerPassword: "password-123" });
    otherAdmin = await login("boss@globex.test", "globex");
  }, 120_000);

  afterAll(async () => {
    await nc?.close();
    await app?.stop();
  });

  describe("login", () => {
    it("answers an access token for the right email, password and organization", async () => {
      const res = await app.call("POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
      expect(res.status).toBe(200);
      expect(res.body.accessToken).toMatch(/^wrs_[0-9a-f]{64}$/);
    });

    it("gives the same answer for a wrong password, an unknown email and an unknown organization", async () => {
      // The four hash at once. On a machine busy enough that the password-hash queue would wait
      // past its limit, a login is shed with 429 and Retry-After before anything is checked; a
      // client tries again then, and so does this test: what it checks is the answer to the check.
      const login = async (body: object) => {
        for (let attempt = 1; ; attempt++) {
          const res = await app.call("POST", "/auth/login", { body });
          if (res.status !== 429 || !String(res.body.error).startsWith("too many password checks") || attempt === 10) return res;
          await new Promise((r) => setTimeout(r, 1000 * Number(res.headers.get("retry-after") ?? 1)));
        }
      };
      const answers = await Promise.all([
        login({ email: OWNER.email, password: "wrong password", orgSlug: OWNER.org }),
        login({ email: "nobody@acme.test", password: OWNER.password, orgSlug: OWNER.org }),
        login({ email: OWNER.email, password: OWNER.password, orgSlug: "no-such-org" }),
        login({ email: "member@acme.test", password: "password-123", orgSlug: "globex" }),
      ]);
      for (const res of answers) {
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ error: "invalid email, password or organization" });
      }
    });

    it("revokes a session at logout", async () => {
      const token = await app.ownerToken();
      expect((await app.call("GET", "/o/acme/members", { token })).status).toBe(200);
      expect((await app.call("POST", "/auth/logout", { token })).status).toBe(204);
      expect((await app.call("GET", "/o/acme/members", { token })).status).toBe(401);
    });
  });

  describe("the role matrix", () => {
    const who = () => ({ owner, admin, member, "other org's admin": otherAdmin, "no credential": undefined });
    const cases: { route: string; method: string; path: string; body?: unknown; allowed: string[]; okStatus: number }[] = [
      { route: "issue ingest token", method: "POST", path: "/o/acme/triggers/ingest-token", allowed: ["owner", "admin"], okStatus: 200 },
      { route: "issue chat secret", method: "POST", path: "/o/acme/triggers/chat-secret", allowed: ["owner", "admin"], okStatus: 200 },
      { route: "issue alert-router secret", method: "POST", path: "/o/acme/triggers/alertrouter-secret", allowed: ["owner", "admin"], okStatus: 200 },
      { route: "read the audit log", method: "GET", path: "/o/acme/audit-events", allowed: ["owner", "admin"], okStatus: 200 },
      { route: "list members", method: "GET", path: "/o/acme/members", allowed: ["owner", "admin", "member"], okStatus: 200 },
      { route: "create an API key", method: "POST", path: "/o/acme/api-keys", body: { name: "matrix" }, allowed: ["owner", "admin", "member"], okStatus: 201 },
    ];
    for (const c of cases) {
      it(`${c.route}: ${c.allowed.join(", ")} may; others are refused`, async () => {
        for (const [name, token] of Object.entries(who())) {
          const res = await app.call(c.method, c.path, { token, body: c.body });
          const expected = c.allowed.includes(name) ? c.okStatus : token === undefined ? 401 : 403;
          expect({ name, status: res.status }).toEqual({ name, status: expected });
          if (expected >= 400) expect(typeof res.body.error).toBe("string");
        }
      });
    }

    it("add a member: owner and admin may; member, other org's admin and no credential may not", async () => {
      let n = 0;
      for (const [name, token] of Object.entries(who())) {
        const res = await app.call("POST", "/o/acme/members", {
          token,
          body: { email: `new${n++}-${mode.length}@acme.test`, password: "password-123", role: "member" },
        });
        const expected = ["owner", "admin"].includes(name) ? 201 : token === undefined ? 401 : 403;
        expect({ name, status: res.status }).toEqual({ name, status: expected });
      }
      expect(
        (await app.call("POST", "/o/acme/members", { token: admin, body: { email: "o2@acme.test", password: "password-123", role: "owner" } })).status,
      ).toBe(403);
      expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email: "admin@acme.test", password: "x", role: "member" } })).status).toBe(409);
      expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email: "x@acme.test", password: "password-123", role: "root" } })).status).toBe(
        400,
      );
    });

    it("a credential of one organization never reads another's data", async () => {
      const res = await app.call("GET", "/o/globex/audit-events", { token: admin });
      expect(res.status).toBe(403);
      expect(res.body.events).toBeUndefined();
    });
  });

  describe("API keys", () => {
    it("are shown once, act as a Bearer credential, and stop at once when deleted", async () => {
      const created = await app.call("POST", "/o/acme/api-keys", { token: member, body: { name: "ci" } });
      expect(created.status).toBe(201);
      expect(created.body.key).toMatch(/^wrk_[0-9a-f]{64}$/);
      expect((await app.call("GET", "/o/acme/members", { token: created.body.key })).status).toBe(200);
      expect((await app.call("DELETE", `/o/acme/api-keys/${created.body.id}`, { token: member })).status).toBe(204);
      expect((await app.call("GET", "/o/acme/members", { token: created.body.key })).status).toBe(401);
    });

    it("a member cannot revoke another member's key", async () => {
      const created = await app.call("POST", "/o/acme/api-keys", { token: admin, body: { name: "admin's" } });
      expect((await app.call("DELETE", `/o/acme/api-keys/${created.body.id}`, { token: member })).status).toBe(404);
      expect((await app.call("GET", "/o/acme/members", { token: created.body.key })).status).toBe(200);
    });
  });

  describe("token and secret rotation", () => {
    const identity = () => createClient(IdentityService, internal);
    const refused = (p: Promise<unknown>) =>
      p.then(
        () => undefined,
        (e: unknown) => ConnectError.from(e).code,
      );

    it("replaces the ingest token at once: the old one is refused on the very next request", async () => {
      const first = await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner });
      expect(first.body.token).toMatch(/^[0-9a-f]{64}$/);
      expect((await identity().resolveIngestToken({ token: first.body.token })).slug).toBe("acme");
      const second = await app.call("POST", "/o/acme/triggers/ingest-token", { token: admin });
      expect(second.body.token).not.toBe(first.body.token);
      expect(await refused(identity().resolveIngestToken({ token: first.body.token }))).toBe(Code.Unauthenticated);
      expect((await identity().resolveIngestToken({ token: second.body.token })).slug).toBe("acme");
    });

    it("refuses a replaced ingest token on POST /triggers at once, on every replica, though intake caches the lookup", async () => {
      const urls = "gatewayUrls" in app ? (app as { gatewayUrls: string[] }).gatewayUrls : [app.url];
      const alert = (n: number) => ({ alert_type: "error", title: "rotation probe", alert_id: `rotation-${mode.length}`, event_id: `rotation-${n}` });
      let n = 0;
      let token = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
      for (let round = 0; round < 5; round++) {
        // Warm every intake replica's cache through every gateway.
        for (let i = 0; i < 8; i++) {
          const res = await callApi(urls[i % urls.length]!, "POST", "/triggers", { token, body: alert(n++) });
          expect([200, 201]).toContain(res.status);
        }
        const replaced = token;
        token = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: admin })).body.token;
        const answers = await Promise.all(
          Array.from({ length: 8 }, (_, i) => callApi(urls[i % urls.length]!, "POST", "/triggers", { token: replaced, body: alert(n++) })),
        );
        for (const res of answers) expect({ status: res.status, body: res.body }).toEqual({ status: 401, body: { error: "Invalid trigger ingest token" } });
        expect((await callApi(urls[0]!, "POST", "/triggers", { token, body: alert(n++) })).status).toBe(200);
      }
    });

    for (const [kind, path] of [
      ["chat", "chat-secret"],
      ["alertrouter", "alertrouter-secret"],
    ] as const) {
      it(`replaces the ${kind} secret at once`, async () => {
        const first = (await app.call("POST", `/o/acme/triggers/${path}`, { token: admin })).body.secret;
        expect(first).toMatch(/^[0-9a-f]{64}$/);
        expect((await identity().resolveReceiverSecret({ kind, secret: first, orgSlug: kind === "chat" ? "acme" : "" })).slug).toBe("acme");
        const second = (await app.call("POST", `/o/acme/triggers/${path}`, { token: owner })).body.secret;
        expect(await refused(identity().resolveReceiverSecret({ kind, secret: first, orgSlug: kind === "chat" ? "acme" : "" }))).toBe(Code.Unauthenticated);
        expect((await identity().resolveReceiverSecret({ kind, secret: second, orgSlug: kind === "chat" ? "acme" : "" })).slug).toBe("acme");
      });
    }

    it("keeps each secret separate: the ingest token is not a chat secret", async () => {
      const token = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
      expect(await refused(identity().resolveReceiverSecret({ kind: "chat", secret: token, orgSlug: "acme" }))).toBe(Code.Unauthenticated);
    });

    it("audits each issue, and never the value", async () => {
      const issued = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
      const events = (await app.call("GET", "/o/acme/audit-events", { token: admin })).body.events as { kind: string; actor: string; data: object }[];
      const kinds = events.map((e) => e.kind);
      expect(kinds).toContain("trigger.ingest_token.issued");
      expect(kinds).toContain("trigger.chat_secret.issued");
      expect(kinds).toContain("trigger.alertrouter_secret.issued");
      expect(kinds).toContain("api_key.created");
      expect(kinds).toContain("member.added");
      expect(events[0]).toMatchObject({ kind: "trigger.ingest_token.issued", actor: OWNER.email });
      expect(JSON.stringify(events)).not.toContain(issued);
    });

    it("audits a failed receiver authentication with its reason", async () => {
      await refused(identity().resolveReceiverSecret({ kind: "chat", secret: "0".repeat(64), orgSlug: "acme" }));
      const events = (await app.call("GET", "/o/acme/audit-events", { token: admin })).body.events as { kind: string; data: { reason?: string } }[];
      expect(events.find((e) => e.kind === "receiver.auth_failed")?.data.reason).toBe("secret wrong");
    });

    it("filters the audit log by kind, kind prefix and actor, and pages a filtered view, over REST and Connect", async () => {
      for (const kind of ["ingest-token", "alertrouter-secret"])
        expect((await app.call("POST", `/o/acme/triggers/${kind}`, { token: owner })).status).toBe(200);
      for (let i = 0; i < 3; i++) expect((await app.call("POST", "/o/acme/triggers/chat-secret", { token: owner })).status).toBe(200);
      type Listed = { events: { kind: string; actor: string }[]; nextCursor?: string };
      const byKind = (await app.call("GET", "/o/acme/audit-events?kind=trigger.chat_secret.issued", { token: admin })).body as Listed;
      expect(byKind.events.length).toBeGreaterThanOrEqual(3);
      expect(new Set(byKind.events.map((e) => e.kind))).toEqual(new Set(["trigger.chat_secret.issued"]));

      const byPrefix = (await app.call("GET", "/o/acme/audit-events?kind=trigger.", { token: admin })).body as Listed;
      expect(byPrefix.events.every((e) => e.kind.startsWith("trigger."))).toBe(true);
      expect(new Set(byPrefix.events.map((e) => e.kind))).toEqual(
        new Set(["trigger.ingest_token.issued", "trigger.chat_secret.issued", "trigger.alertrouter_secret.issued"]),
      );

      const byActor = (await app.call("GET", "/o/acme/audit-events?actor=admin@acme.test", { token: admin })).body as Listed;
      expect(byActor.events.every((e) => e.actor === "admin@acme.test")).toBe(true);
      const ownerEvents = (
        await app.call("GET", `/o/acme/audit-events?actor=${encodeURIComponent(OWNER.email)}&kind=trigger.chat_secret.issued`, { token: admin })
      ).body as Listed;
      const ownersIssues = byKind.events.filter((e) => e.actor === OWNER.email);
      expect(ownersIssues.length).toBeGreaterThanOrEqual(3);
      expect(ownerEvents.events).toEqual(ownersIssues);

      // Paging keeps the filter: two pages of one chat-secret issue each, then the rest.
      const first = (await app.call("GET", "/o/acme/audit-events?kind=trigger.chat_secret.issued&limit=1", { token: admin })).body as Listed;
      expect(first.events).toEqual([byKind.events[0]]);
      const second = (
        await app.call("GET", `/o/acme/audit-events?kind=trigger.chat_secret.issued&limit=1&cursor=${encodeURIComponent(first.nextCursor!)}`, { token: admin })
      ).body as Listed;
      expect(second.events).toEqual([byKind.events[1]]);

      const connect = await app.call("POST", "/warroom.identity.v1.IdentityService/ListAuditEvents", {
        token: admin,
        body: { org: "acme", kind: "trigger.chat_secret.issued", actor: OWNER.email },
        headers: { "connect-protocol-version": "1" },
      });
      expect(connect.status).toBe(200);
      expect((connect.body as Listed).events).toEqual(ownersIssues);
      expect((await app.call("GET", "/o/acme/audit-events?kind=trigger.", { token: member })).status).toBe(403);
      const tooLong = await app.call("GET", `/o/acme/audit-events?actor=${"a".repeat(400)}`, { token: admin });
      expect(tooLong.status).toBe(400);
    });
  });

  it("stores no raw token, secret, key or password in the identity tables", async () => {
    const values = [
      (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token,
      (await app.call("POST", "/o/acme/triggers/chat-secret", { token: owner })).body.secret,
      (await app.call("POST", "/o/acme/triggers/alertrouter-secret", { token: owner })).body.secret,
      (await app.call("POST", "/o/acme/api-keys", { token: owner, body: { name: "dump" } })).body.key,
      owner,
      OWNER.password,
      "password-123",
    ];
    const sql = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    try {
      const tables = await sql<{ table_name: string }[]>`select table_name from information_schema.tables where table_schema = 'identity'`;
      let dump = "";
      for (const { table_name } of tables) {
        const rows = await sql.unsafe(`select * from identity.${table_name}`);
        dump += JSON.stringify(rows, (_k, v) => (v && v.type === "Buffer" ? Buffer.from(v.data).toString("hex") : v));
      }
      expect(dump.length).toBeGreaterThan(1000);
      for (const value of values) expect(dump).not.toContain(value);
    } finally {
      await sql.end();
    }
  });

  it("keeps internal methods off the public port", async () => {
    const res = await app.call("POST", "/warroom.identity.v1.IdentityService/Bootstrap", {
      body: { orgSlug: "evil", ownerEmail: "e@evil.test", ownerPassword: "password-123" },
      headers: { "connect-protocol-version": "1" },
    });
    expect(res.status).toBe(501);
    const resolve = await app.call("POST", "/warroom.identity.v1.IdentityService/ResolveIngestToken", {
      body: { token: "0".repeat(64) },
      headers: { "connect-protocol-version": "1" },
    });
    expect(resolve.status).toBe(501);
  });

  it("serves public methods over Connect too", async () => {
    const res = await app.call("POST", "/warroom.identity.v1.IdentityService/ListMembers", {
      token: member,
      body: { org: "acme" },
      headers: { "connect-protocol-version": "1" },
    });
    expect(res.status).toBe(200);
    expect(res.body.members.length).toBeGreaterThanOrEqual(3);
  });
});
