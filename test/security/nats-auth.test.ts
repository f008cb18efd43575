import { readFileSync } from "node:fs";
import { headers } from "@nats-io/nats-core";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CORRELATION_CHANGED,
  CUSTOM_SOURCE_CHANGED,
  GROUPING_OVERRIDES_CHANGED,
  REMOTE_SOURCE_CHANGED,
  SUBSCRIPTION_CREATED,
} from "../../services/runtime/transport/broadcast.js";
import { loadConfig } from "../../services/runtime/config/config.js";
import { natsAuthorizationBlock, NATS_USERS, natsPermissions } from "../../services/runtime/transport/nats-permissions.js";
import { freshDatabase, startApp, type TestApp } from "../support/app.js";
import { embeddedEnv, startServiceProcess, tempDataDir } from "../support/service-process.js";
import { startClusterApp } from "../support/cluster.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

/**
 * The bus is authenticated and least-privilege: every service process connects as its own NATS
 * user that may subscribe to its own subjects and call only what it calls. A client without
 * credentials is refused; one with the gateway's may call public methods but not Bootstrap or
 * Record, and no service can read another's requests (login passwords, bearer tokens).
 */
const password = (user: string) => `pw-${user}-${user.length * 7}`;
const protoHeaders = () => {
  const h = headers();
  h.set("content-type", "application/proto");
  return h;
};
const fixture = (name: string) => JSON.parse(readFileSync(new URL(`../fixtures/${name}`, import.meta.url), "utf8"));

describe("a cluster on an authenticated NATS", () => {
  let app: Awaited<ReturnType<typeof startClusterApp>>;
  const clients: NatsConnection[] = [];
  const as = async (user: string) => {
    const nc = await connect({ servers: app.natsUrl!, user, pass: password(user), inboxPrefix: `_INBOX_${user}` });
    clients.push(nc);
    return nc;
  };

  beforeAll(async () => {
    app = await startClusterApp({
      intakes: 1,
      natsConfig: natsAuthorizationBlock((user) => JSON.stringify(password(user))),
      envFor: (name) => ({ NATS_USER: name, NATS_PASSWORD: password(name) }),
    });
  }, 120_000);
  afterAll(async () => {
    for (const nc of clients) await nc.close().catch(() => {});
    await app?.stop();
  });

  it("works end to end with each service's own user", async () => {
    const owner = await app.ownerToken();
    expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email: "m@acme.test", password: "password-123", role: "member" } })).status).toBe(
      201,
    );
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
    const opened = await app.call("POST", "/triggers", { token: ingest, body: fixture("datadog/custom-body-triggered.json") });
    expect(opened.status).toBe(201);
    const chatSecret = (await app.call("POST", "/o/acme/triggers/chat-secret", { token: owner })).body.secret as string;
    const chat = await app.call("POST", "/triggers/chat/acme", {
      raw: JSON.stringify({ channel_id: "C-bus", message_id: "bus-1", text: "disk full on db-2" }),
      headers: { "content-type": "application/json", "x-service-chat-secret": chatSecret },
    });
    expect(chat.status).toBe(201);
    const list = await app.call("GET", "/o/acme/incidents", { token: owner });
    expect(list.status).toBe(200);
    expect(list.body.incidents.length).toBeGreaterThanOrEqual(2);
    const heartbeat = await app.call("POST", "/o/acme/heartbeats", {
      token: owner,
      body: { name: "nightly", expectedIntervalSeconds: 3600, graceSeconds: 60 },
    });
    expect(heartbeat.status).toBe(201);
  });

  it("applies config as code, whose heartbeats, windows and deadlines intake reads and writes through their services", async () => {
    const owner = await app.ownerToken();
    const yaml = [
      "version: 1",
      "heartbeats:",
      "  - name: config-nightly",
      "    expectedIntervalSeconds: 3600",
      "    graceSeconds: 60",
      "maintenanceWindows:",
      '  - startsAt: "2030-01-01T02:00:00.000Z"',
      '    endsAt: "2030-01-01T04:00:00.000Z"',
      "    reason: config window",
      "escalation:",
      "  sev1: [5, 15]",
    ].join("\n");
    const applied = await app.call("POST", "/o/acme/config", { token: owner, body: { yaml } });
    expect(applied.status, JSON.stringify(applied.body)).toBe(200);
    const exported = await app.call("GET", "/o/acme/config", { token: owner });
    expect(exported.status, JSON.stringify(exported.body)).toBe(200);
    expect(exported.body.yaml).toContain("config-nightly");
    expect(exported.body.yaml).toContain("config window");
  });

  it("refuses a client without credentials, or with a wrong password", async () => {
    await expect(connect({ servers: app.natsUrl! })).rejects.toThrow(/authorization/i);
    await expect(connect({ servers: app.natsUrl!, user: "gateway", pass: "guess" })).rejects.toThrow(/authorization/i);
  });

  it("lets the gateway's user call public methods but not Bootstrap or Record", async () => {
    const nc = await as("gateway");
    const subject = (m: string) => `rpc.warroom.${m}`;
    await expect(nc.request(subject("identity.v1.IdentityService.Bootstrap"), new Uint8Array(0), { timeout: 2000 })).rejects.toThrow(/permission/i);
    await expect(nc.request(subject("incidents.v1.IncidentsService.Record"), new Uint8Array(0), { timeout: 2000 })).rejects.toThrow(/permission/i);
    await expect(nc.request(subject("identity.v1.IdentityService.ResolveIngestToken"), new Uint8Array(0), { timeout: 2000 })).rejects.toThrow(/permission/i);
    // A public method is answered (here with a protocol error for the empty body, but answered).
    const reply = await nc.request(subject("identity.v1.IdentityService.Login"), new Uint8Array(0), {
      // A bound that detects a hang: the identity process may still be busy with the logins before.
      timeout: 30_000,
      headers: protoHeaders(),
    });
    expect(reply.headers?.get("Connect-Http-Status")).toBeTruthy();
  });

  it("refuses the gateway's user publishing domain events or dead letters: it only reads them", async () => {
    const nc = await as("gateway");
    for (const subject of ["events.incident.opened", "events.credential.changed", "deadletter.comms-war-room-link.events.incident.opened"])
      await expect(nc.request(subject, new Uint8Array(0), { timeout: 2000 }), subject).rejects.toThrow(/permission/i);
  });

  it("lets remotesource's user broadcast its connections notice, and no other notice", async () => {
    const listener = await as("identity");
    const heard: string[] = [];
    const watched = new Set([`broadcast.${REMOTE_SOURCE_CHANGED}`, `broadcast.${SUBSCRIPTION_CREATED}`]);
    listener.subscribe("broadcast.>", {
      callback: (err, msg) => {
        if (!err && watched.has(msg.subject)) heard.push(msg.subject);
      },
    });
    await listener.flush();
    const nc = await as("remotesource");
    // Another service's notice first: had it been let through, the server would deliver it first.
    nc.publish(`broadcast.${SUBSCRIPTION_CREATED}`, "00000000-0000-4000-8000-000000000000");
    nc.publish(`broadcast.${REMOTE_SOURCE_CHANGED}`, "00000000-0000-4000-8000-000000000000");
    await nc.flush();
    await expect.poll(() => [...heard], { timeout: 5000 }).toEqual([`broadcast.${REMOTE_SOURCE_CHANGED}`]);
  });

  it("lets no service read another service's requests or replies", async () => {
    for (const user of ["gateway", "intake"]) {
      const nc = await as(user);
      const refused = new Promise<Error>((resolve) => {
        void (async () => {
          for await (const s of nc.status()) if (s.type === "error") resolve(s.error as Error);
        })();
      });
      const sub = nc.subscribe("rpc.warroom.identity.v1.IdentityService.>");
      const err = await Promise.race([
        sub.closed.then((e) => e ?? new Error("closed")),
        refused,
        new Promise<Error>((r) => setTimeout(() => r(new Error("not refused")), 3000)),
      ]);
      expect(String(err)).toMatch(/permission/i);
      const inbox = nc.subscribe("_INBOX_identity.>");
      const inboxErr = await Promise.race([
        inbox.closed.then((e) => e ?? new Error("closed")),
        new Promise<Error>((r) => setTimeout(() => r(new Error("not refused")), 3000)),
      ]);
      expect(String(inboxErr)).toMatch(/permission/i);
    }
  });

  it("gives every service a user, and no service but identity the right to broadcast, intake, subscriptions and remotesource only their own notices", () => {
    for (const user of NATS_USERS) {
      const p = natsPermissions(user);
      expect(p.publish.allow.some((s) => s.includes("IdentityService.Bootstrap"))).toBe(false);
      expect(p.publish.allow.includes("broadcast.>")).toBe(user === "identity");
      const broadcasts = p.publish.allow.filter((s) => s.startsWith("broadcast."));
      const own: Partial<Record<typeof user, string[]>> = {
        identity: ["broadcast.>"],
        intake: [`broadcast.${CUSTOM_SOURCE_CHANGED}`, `broadcast.${GROUPING_OVERRIDES_CHANGED}`, `broadcast.${CORRELATION_CHANGED}`],
        subscriptions: [`broadcast.${SUBSCRIPTION_CREATED}`],
        remotesource: [`broadcast.${REMOTE_SOURCE_CHANGED}`],
      };
      expect(broadcasts).toEqual(own[user] ?? []);
    }
    // The gateway runs no service: it makes calls and reads events, and writes neither events nor dead letters.
    const gateway = natsPermissions("gateway").publish.allow;
    expect(gateway.filter((s) => s.startsWith("events.") || s.startsWith("deadletter."))).toEqual([]);
    expect(natsPermissions("intake").publish.allow).toContain("events.>");
  });
});

describe("two installations sharing one NATS", () => {
  let nats: PrivateNats;
  let a: TestApp;
  let b: TestApp;

  beforeAll(async () => {
    nats = await startPrivateNats();
    a = await startApp({ nats: nats.url, env: { NATS_SUBJECT_PREFIX: "team-a" } });
    b = await startApp({ nats: nats.url, env: { NATS_SUBJECT_PREFIX: "team-b", BOOTSTRAP_OWNER_PASSWORD: "team b's own password" } });
  }, 120_000);
  afterAll(async () => {
    await a?.stop();
    await b?.stop();
    await nats?.cleanup();
  });

  it("answer only their own calls", async () => {
    // Without a prefix both installations' replicas share one queue group, so about half of
    // these calls would be answered by the other installation's database.
    const logins: number[] = [];
    for (let i = 0; i < 4; i++)
      logins.push((await b.call("POST", "/auth/login", { body: { email: "owner@acme.test", password: "team b's own password", orgSlug: "acme" } })).status);
    expect(logins).toEqual(Array(4).fill(200));
    const token = (await b.call("POST", "/auth/login", { body: { email: "owner@acme.test", password: "team b's own password", orgSlug: "acme" } })).body
      .accessToken as string;
    const lists = await Promise.all(Array.from({ length: 16 }, () => b.call("GET", "/o/acme/members", { token }).then((r) => r.status)));
    expect(lists).toEqual(Array(16).fill(200));
    expect((await a.call("GET", "/o/acme/members", { token })).status).toBe(401);
  });

  it("carry ingest tokens and receiver secrets in headers, never in a message body", async () => {
    const observer = await connect({ servers: nats.url });
    const bodies: string[] = [];
    const sub = observer.subscribe("team-a.rpc.>", {
      callback: (_err, msg) => {
        bodies.push(Buffer.from(msg.data).toString("latin1"));
      },
    });
    await observer.flush();
    try {
      const owner = await a.ownerToken();
      const ingest = (await a.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
      const chatSecret = (await a.call("POST", "/o/acme/triggers/chat-secret", { token: owner })).body.secret as string;
      expect((await a.call("POST", "/triggers", { token: ingest, body: fixture("datadog/custom-body-triggered.json") })).status).toBe(201);
      const chat = await a.call("POST", "/triggers/chat/acme", {
        raw: JSON.stringify({ channel_id: "C-hdr", message_id: "hdr-1", text: "queue stuck" }),
        headers: { "content-type": "application/json", "x-service-chat-secret": chatSecret },
      });
      expect(chat.status).toBe(201);
      await observer.flush();
      expect(bodies.length).toBeGreaterThan(3);
      for (const body of bodies) {
        expect(body).not.toContain(ingest);
        expect(body).not.toContain(chatSecret);
      }
    } finally {
      sub.unsubscribe();
      await observer.close();
    }
  });
});

describe("the NATS users shipped in deploy/", () => {
  it("are the ones the code derives from the schema (npm run nats-config)", () => {
    const committed = readFileSync(new URL("../../deploy/components/nats/authorization.conf", import.meta.url), "utf8");
    expect(committed).toContain(natsAuthorizationBlock((user) => `$NATS_PASSWORD_${user.toUpperCase()}`));
  });
});

describe("NATS settings", () => {
  // A cluster process: a Postgres server beside NATS (an embedded one would be refused).
  const base = { NATS_URL: "nats://127.0.0.1:4222", DATABASE_URL: "postgres://warroom@127.0.0.1:5432/warroom" };
  it("take one kind of credential, complete pairs and a well-formed prefix", () => {
    expect(() => loadConfig({ ...base, NATS_USER: "intake" })).toThrow(/NATS_USER and NATS_PASSWORD must be set together/);
    expect(() => loadConfig({ ...base, NATS_USER: "intake", NATS_PASSWORD: "p", NATS_TOKEN: "t" })).toThrow(/one kind of NATS credential/);
    expect(() => loadConfig({ ...base, NATS_TLS_CERT_FILE: "/c.pem" })).toThrow(/NATS_TLS_CERT_FILE and NATS_TLS_KEY_FILE/);
    expect(() => loadConfig({ ...base, NATS_NKEY_SEED: "not-a-seed" })).toThrow(/NATS_NKEY_SEED/);
    expect(() => loadConfig({ ...base, NATS_SUBJECT_PREFIX: "a b" })).toThrow(/NATS_SUBJECT_PREFIX/);
    expect(loadConfig({ ...base, NATS_TOKEN: "t", NATS_TLS_CA_FILE: "/ca.pem", NATS_SUBJECT_PREFIX: "team-a.prod" }).NATS_SUBJECT_PREFIX).toBe("team-a.prod");
  });
});

describe("a NATS that asks for no credentials", () => {
  let nats: PrivateNats;
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  const data = tempDataDir();

  beforeAll(async () => {
    nats = await startPrivateNats();
    db = await freshDatabase();
  });
  afterAll(async () => {
    await nats?.cleanup();
    await db?.drop();
    data.cleanup();
  });

  const start = (allow: string) =>
    startServiceProcess({ ...embeddedEnv(data.dir), DATABASE_URL: db.url, NATS_URL: nats.url, NATS_ALLOW_UNAUTHENTICATED: allow });

  it("is refused at start: the process exits naming the problem, and serves nothing", async () => {
    const service = start("false");
    const outcome = await Promise.race([
      service.exited.then(() => "exited"),
      service.serving.then(
        () => "serving",
        () => "exited",
      ),
    ]);
    if (outcome === "serving") {
      service.child.kill("SIGKILL");
      await service.exited;
    }
    expect(outcome).toBe("exited");
    const { code } = await service.exited;
    expect(code).not.toBe(0);
    expect(service.output()).toMatch(/accepted this process without credentials/);
    expect(service.output()).toMatch(/NATS_ALLOW_UNAUTHENTICATED=true/);
    expect(service.output()).not.toMatch(/"msg":"serving"/);
  });

  it("is used when NATS_ALLOW_UNAUTHENTICATED=true, with a warning at every start", async () => {
    const service = start("true");
    try {
      await service.serving;
      expect(service.output()).toMatch(/"level":40[^\n]*NATS_ALLOW_UNAUTHENTICATED=true/);
    } finally {
      service.child.kill("SIGTERM");
      await service.exited;
    }
  });
});
