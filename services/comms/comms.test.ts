import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClients, type Clients } from "../runtime/transport/clients.js";
import { createSecretBox, newSecretKeyEntry, parseSecretKeys } from "../runtime/credentials/secret-box.js";
import { startApp, type TestApp } from "../../test/support/app.js";
import { CARD_BYTE_LIMIT } from "./adaptive-card.js";
import { associatedData } from "./chat-webhook-connection.js";
import { chatWebhookPayloadProblems } from "./testing/adaptive-card-validation.js";
import {
  closedPort,
  makeTestCertificates,
  startCanary,
  startChatWebhookReceiver,
  type ChatWebhookReceiver,
  type TestCertificates,
} from "../../test/support/https-receiver.js";

const PUBLIC_URL = "https://warroom.example.test";
const CONNECTION = "/o/acme/integrations/chatwebhook/connections/default";
const EGRESS = "/o/acme/oncall/egress";
const KEY_ID = "k-test-1";
/** A key that sealed values before the rotation to KEY_ID; still configured, second. */
const OLD_KEY = newSecretKeyEntry("k-old");

let app: TestApp;
let certs: TestCertificates;
let receiver: ChatWebhookReceiver;
let canary: Awaited<ReturnType<typeof startCanary>>;
let sql: postgres.Sql;
let clients: Clients;
let orgId: string;
let owner: string;
let memberSession: string;
let memberKey: string;
/** The path and query of every webhook URL saved in this file: each is a credential. */
const savedSecrets: string[] = [];

function secret(): string {
  const value = randomBytes(16).toString("hex");
  savedSecrets.push(value);
  return value;
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function openIncident(options: { source?: string; title?: string; severity?: string } = {}): Promise<string> {
  const source = options.source ?? "metrics-monitor";
  const response = await clients.incidents.record({
    orgId,
    orgSlug: "acme",
    alert: {
      source,
      attachIdentity: `comms-test-${randomBytes(6).toString("hex")}`,
      kind: "alert",
      title: options.title ?? "Checkout error rate above 5%",
      severity: options.severity ?? "sev2",
      summary: "error rate 7.3%",
    },
  });
  expect(response.outcome).toBe("opened");
  return response.incident!.id;
}

const messagesPath = (incidentId: string) => `/o/acme/incidents/${incidentId}/comms/messages`;

async function draft(incidentId: string, body: string, channel = "chatwebhook", token = memberKey): Promise<{ messageId: string; version: string }> {
  const res = await app.call("POST", messagesPath(incidentId), { token, body: { channel, body } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

async function approved(incidentId: string, body: string, channel = "chatwebhook"): Promise<string> {
  const drafted = await draft(incidentId, body, channel);
  const res = await app.call("POST", `${messagesPath(incidentId)}/${drafted.messageId}/approve`, { token: memberKey, body: { version: drafted.version } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return drafted.messageId;
}

const send = (incidentId: string, messageId: string, token = memberKey) => app.call("POST", `${messagesPath(incidentId)}/${messageId}/send`, { token });

async function saveConnection(url: string): Promise<void> {
  const res = await app.call("PUT", CONNECTION, { token: owner, body: { webhookUrl: url } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

async function setEgress(enabled: boolean): Promise<void> {
  const res = await app.call("PUT", EGRESS, { token: owner, body: { enabled } });
  expect(res.status).toBe(200);
  expect(res.body).toEqual({ enabled });
}

async function timeline(incidentId: string): Promise<{ kind: string; summary: string | null; data: Record<string, unknown> | null }[]> {
  const res = await app.call("GET", `/o/acme/incidents/${incidentId}`, { token: memberKey });
  expect(res.status).toBe(200);
  return res.body.timeline;
}

/** Posts the receiver got that carry `marker` in their card. */
function postsWith(marker: string) {
  return receiver.posts.filter((p) => JSON.stringify(p.body).includes(marker));
}

beforeAll(async () => {
  certs = makeTestCertificates();
  canary = await startCanary();
  receiver = await startChatWebhookReceiver(certs, `https://127.0.0.1:${canary.port}/landing`);
  app = await startApp({
    env: {
      PUBLIC_URL,
      SECRETS_KEYS: `${KEY_ID}:${newSecretKeyEntry("x").slice(2)},${OLD_KEY}`,
      EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
      EGRESS_CA_FILE: certs.caFile,
      CHAT_WEBHOOK_TIMEOUT_SECONDS: "1.5",
    },
  });
  sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
  clients = createClients(app.process.transport);
  orgId = (await clients.identity.getOrganization({ slug: "acme" })).id;
  owner = await app.ownerToken();
  const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email: "member@acme.test", password: "member password 1", role: "member" } });
  expect(added.status).toBe(201);
  const login = await app.call("POST", "/auth/login", { body: { email: "member@acme.test", password: "member password 1", orgSlug: "acme" } });
  memberSession = login.body.accessToken;
  const key = await app.call("POST", "/o/acme/api-keys", { token: memberSession, body: { name: "comms test" } });
  expect(key.status).toBe(201);
  memberKey = key.body.key;
});

afterAll(async () => {
  await sql?.end();
  await app?.stop();
  await receiver?.close();
  await canary?.close();
  certs?.remove();
});

/** warroom_chat_webhook_requests_total by result, as the process's /metrics shows it. */
async function chatWebhookCalls(): Promise<Record<string, number>> {
  const text = await (await fetch(app.process.metricsUrl!)).text();
  return Object.fromEntries([...text.matchAll(/^warroom_chat_webhook_requests_total\{result="(\w+)"\} (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]));
}

describe("defaults", () => {
  it("real egress is off for a new organization", async () => {
    const res = await app.call("GET", EGRESS, { token: memberKey });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ enabled: false });
  });
});

describe("chat-webhook connection", () => {
  it("only an admin saves, tests or deletes it; any member reads whether it is connected", async () => {
    const url = receiver.url("ok", secret());
    expect((await app.call("PUT", CONNECTION, { token: memberKey, body: { webhookUrl: url } })).status).toBe(403);
    expect((await app.call("PUT", CONNECTION, { token: memberSession, body: { webhookUrl: url } })).status).toBe(403);
    expect((await app.call("POST", `${CONNECTION}/test`, { token: memberKey })).status).toBe(403);
    expect((await app.call("DELETE", CONNECTION, { token: memberKey })).status).toBe(403);
    expect((await app.call("PUT", CONNECTION, { body: { webhookUrl: url } })).status).toBe(401);
    const read = await app.call("GET", CONNECTION, { token: memberKey });
    expect(read.status).toBe(200);
    expect(read.body).toEqual({ name: "default", connected: false });
  });

  it("an empty webhookUrl answers 400 webhookUrl required", async () => {
    for (const body of [{ webhookUrl: "" }, { webhookUrl: "   " }, {}]) {
      const res = await app.call("PUT", CONNECTION, { token: owner, body });
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ error: "webhookUrl required" });
    }
  });

  it("refuses plain http, embedded credentials and private or special addresses, checked through the egress policy", async () => {
    const hidden = secret();
    const cases: [string, RegExp][] = [
      [`http://127.0.0.1:${receiver.port}/hooks/ok/${hidden}`, /must be an https URL/],
      [`https://user:${hidden}@127.0.0.1:${receiver.port}/hooks/ok`, /must not contain a user name or password/],
      [`https://10.1.2.3/hooks/${hidden}`, /10\.1\.2\.3, an RFC 1918 private address/],
      [`https://192.168.1.20/hooks/${hidden}`, /RFC 1918 private address/],
      [`https://169.254.169.254/latest/${hidden}`, /cloud metadata endpoint/],
      [`https://[::1]:${receiver.port}/hooks/${hidden}`, /loopback address/],
      [`https://[::ffff:10.0.0.1]/hooks/${hidden}`, /IPv4-mapped/],
      [`https://0.0.0.0/hooks/${hidden}`, /unspecified/],
      [`https://100.64.0.1/hooks/${hidden}`, /carrier-grade NAT/],
      [`not a url ${hidden}`, /not a valid absolute URL/],
    ];
    for (const [webhookUrl, message] of cases) {
      const res = await app.call("PUT", CONNECTION, { token: owner, body: { webhookUrl } });
      expect(res.status, webhookUrl).toBe(400);
      expect(res.body.error).toMatch(message);
      expect(res.body.error).toMatch(/^webhookUrl /);
      // The refusal never repeats the URL's secret part.
      expect(JSON.stringify(res.body)).not.toContain(hidden);
    }
    expect((await app.call("GET", CONNECTION, { token: owner })).body.connected).toBe(false);
  });

  it("saves an https URL, never shows it again, and Test connection posts a real card while egress is off", async () => {
    await setEgress(false);
    const key = secret();
    const url = receiver.url("ok", key);
    const saved = await app.call("PUT", CONNECTION, { token: owner, body: { webhookUrl: url } });
    expect(saved.status).toBe(200);
    expect(saved.body).toEqual({ name: "default", connected: true });
    const read = await app.call("GET", CONNECTION, { token: memberSession });
    expect(read.body).toEqual({ name: "default", connected: true });
    expect(JSON.stringify(read.body)).not.toContain(key);

    const before = receiver.posts.length;
    const tested = await app.call("POST", `${CONNECTION}/test`, { token: owner });
    expect(tested.status).toBe(200);
    expect(tested.body).toEqual({ ok: true, error: null });
    expect(receiver.posts.length).toBe(before + 1);
    const post = receiver.posts.at(-1)!;
    expect(post.path).toContain(key);
    expect(post.headers["content-type"]).toBe("application/json");
    expect(chatWebhookPayloadProblems(post.body)).toEqual([]);
    expect(JSON.stringify(post.body)).toContain("Test message from warroom");
  });

  it("Test connection reports the channel's refusal as Chat webhook HTTP <status>", async () => {
    await saveConnection(receiver.url("gone", secret()));
    const tested = await app.call("POST", `${CONNECTION}/test`, { token: owner });
    expect(tested.status).toBe(200);
    expect(tested.body).toEqual({ ok: false, error: "Chat webhook HTTP 404" });
  });

  it("DELETE removes it (204); Test connection then answers 404", async () => {
    await saveConnection(receiver.url("ok", secret()));
    const deleted = await app.call("DELETE", CONNECTION, { token: owner });
    expect(deleted.status).toBe(204);
    expect((await app.call("GET", CONNECTION, { token: owner })).body).toEqual({ name: "default", connected: false });
    const tested = await app.call("POST", `${CONNECTION}/test`, { token: owner });
    expect(tested.status).toBe(404);
    expect(tested.body.error).toMatch(/no chat-webhook connection is saved/);
    // Deleting again is not an error.
    expect((await app.call("DELETE", CONNECTION, { token: owner })).status).toBe(204);
  });
});

describe("drafts and approval", () => {
  let incidentId: string;
  beforeAll(async () => {
    incidentId = await openIncident();
  });

  it("any member drafts with an API key or a session token: {messageId, version}", async () => {
    const byKey = await app.call("POST", messagesPath(incidentId), { token: memberKey, body: { channel: "chatwebhook", body: "Investigating." } });
    expect(byKey.status).toBe(201);
    expect(Object.keys(byKey.body).sort()).toEqual(["messageId", "version"]);
    expect(byKey.body.version).toBe("1");
    const bySession = await app.call("POST", messagesPath(incidentId), {
      token: memberSession,
      body: { channel: "chatwebhook:#ops-updates", body: "Still investigating." },
    });
    expect(bySession.status).toBe(201);
    expect(bySession.body.messageId).not.toBe(byKey.body.messageId);
    expect((await app.call("POST", messagesPath(incidentId), { body: { channel: "chatwebhook", body: "x" } })).status).toBe(401);
  });

  it("any other channel is refused with the accepted values named", async () => {
    for (const channel of ["slack", "email", "chatwebhooks", "teams:ops", ""]) {
      const res = await app.call("POST", messagesPath(incidentId), { token: memberKey, body: { channel, body: "x" } });
      expect(res.status, channel).toBe(400);
      expect(res.body.error).toContain("chatwebhook or chatwebhook:<label>");
    }
    const emptyLabel = await app.call("POST", messagesPath(incidentId), { token: memberKey, body: { channel: "chatwebhook:", body: "x" } });
    expect(emptyLabel.status).toBe(400);
    expect(emptyLabel.body.error).toMatch(/label is empty/);
  });

  it("the body is required and bounded", async () => {
    for (const body of [{ channel: "chatwebhook", body: "" }, { channel: "chatwebhook", body: " \n " }, { channel: "chatwebhook" }]) {
      const res = await app.call("POST", messagesPath(incidentId), { token: memberKey, body });
      expect(res.status).toBe(400);
      expect(res.body).toEqual({ error: "body required" });
    }
    const long = await app.call("POST", messagesPath(incidentId), { token: memberKey, body: { channel: "chatwebhook", body: "x".repeat(8193) } });
    expect(long.status).toBe(400);
    expect(long.body.error).toMatch(/at most 8192 bytes/);
    expect((await app.call("POST", messagesPath(incidentId), { token: memberKey, body: { channel: "chatwebhook", body: "x".repeat(8192) } })).status).toBe(201);
  });

  it("a draft on an incident that does not exist answers 404", async () => {
    const res = await app.call("POST", messagesPath("00000000-0000-4000-8000-000000000000"), { token: memberKey, body: { channel: "chatwebhook", body: "x" } });
    expect(res.status).toBe(404);
  });

  it("approve needs the draft's version: a stale one answers 409; the answer is {messageId, version, state: approved}", async () => {
    const drafted = await draft(incidentId, "Mitigated.");
    const approvePath = `${messagesPath(incidentId)}/${drafted.messageId}/approve`;
    const missing = await app.call("POST", approvePath, { token: memberKey, body: {} });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatch(/version required/);
    const stale = await app.call("POST", approvePath, { token: memberKey, body: { version: "7" } });
    expect(stale.status).toBe(409);
    expect(stale.body.error).toMatch(/stale version 7/);
    const ok = await app.call("POST", approvePath, { token: memberSession, body: { version: drafted.version } });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ messageId: drafted.messageId, version: "2", state: "approved" });
    // The version it was approved at is stale now.
    const again = await app.call("POST", approvePath, { token: memberKey, body: { version: drafted.version } });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatch(/already approved/);
    const unknown = await app.call("POST", `${messagesPath(incidentId)}/00000000-0000-4000-8000-000000000000/approve`, {
      token: memberKey,
      body: { version: "1" },
    });
    expect(unknown.status).toBe(404);
  });

  it("nothing leaves before a person approves: send on a draft answers 409 and posts nothing, egress on or off", async () => {
    await saveConnection(receiver.url("ok", secret()));
    for (const enabled of [false, true]) {
      await setEgress(enabled);
      const marker = `unapproved-${randomBytes(4).toString("hex")}`;
      const drafted = await draft(incidentId, marker);
      const res = await send(incidentId, drafted.messageId);
      expect(res.status).toBe(409);
      expect(res.body.error).toMatch(/is not approved: a person approves it first/);
      expect(postsWith(marker)).toHaveLength(0);
    }
    await setEgress(false);
  });
});

describe("egress switch and send", () => {
  let incidentId: string;
  beforeAll(async () => {
    incidentId = await openIncident({ title: "Payments API returning 503", severity: "sev2" });
    await saveConnection(receiver.url("ok", secret()));
  });

  it("is off by default, read by any member, switched by an admin only", async () => {
    const other = await app.call("GET", EGRESS, { token: memberKey });
    expect(other.status).toBe(200);
    expect(typeof other.body.enabled).toBe("boolean");
    const member = await app.call("PUT", EGRESS, { token: memberKey, body: { enabled: true } });
    expect(member.status).toBe(403);
    expect((await app.call("PUT", EGRESS, { token: memberSession, body: { enabled: true } })).status).toBe(403);
  });

  it("off: an approved send is recorded on the timeline as update_simulated and delivered nowhere", async () => {
    await setEgress(false);
    expect((await app.call("GET", EGRESS, { token: memberKey })).body).toEqual({ enabled: false });
    const marker = `simulated-${randomBytes(4).toString("hex")}`;
    const messageId = await approved(incidentId, `Rollback done. ${marker}`);
    const res = await send(incidentId, messageId);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ messageId, state: "simulated" });
    expect(postsWith(marker)).toHaveLength(0);
    const entry = (await timeline(incidentId)).find((e) => e.data?.messageId === messageId);
    expect(entry?.kind).toBe("update_simulated");
    expect(entry?.summary).toContain(marker);
    // At most once: a second send answers 409 with the recorded state.
    const second = await send(incidentId, messageId);
    expect(second.status).toBe(409);
    expect(second.body.error).toMatch(/already sent \(state: simulated\)/);
  });

  it("switching is audited as comms.egress.switched, actor and new state included", async () => {
    const switched = async () => {
      const res = await app.call("GET", "/o/acme/audit-events", { token: owner });
      expect(res.status).toBe(200);
      return (res.body.events as { kind: string; actor: string; data: { enabled: boolean; previous: boolean } }[]).filter(
        (e) => e.kind === "comms.egress.switched",
      );
    };
    // Published outbox rows have been handed to the in-process subscribers, identity's included.
    const drained = () =>
      waitFor("the comms outbox to be published", async () => {
        const [pending] = await sql<{ n: number }[]>`select count(*)::int as n from comms.outbox where published_at is null`;
        return pending!.n === 0;
      });
    await setEgress(false);
    await drained();
    const before = await switched();
    await setEgress(true);
    await setEgress(false);
    await drained();
    const after = await switched();
    expect(after).toHaveLength(before.length + 2);
    // Newest first.
    expect(after[0]).toMatchObject({ actor: "owner@acme.test", data: { enabled: false, previous: true } });
    expect(after[1]).toMatchObject({ actor: "owner@acme.test", data: { enabled: true, previous: false } });
  });

  it("on: the update is posted as a new Adaptive Card with title, severity, text and room link; the timeline says update_sent", async () => {
    await setEgress(true);
    const marker = `sent-${randomBytes(4).toString("hex")}`;
    const text = `Root cause found: bad config push. Action: reviewers re-approve config changes. ${marker}`;
    const messageId = await approved(incidentId, text, "chatwebhook:#payments");
    const res = await send(incidentId, messageId);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({ messageId, state: "sent" });
    const posts = postsWith(marker);
    expect(posts).toHaveLength(1);
    const post = posts[0]!;
    expect(post.bytes).toBeLessThanOrEqual(CARD_BYTE_LIMIT);
    expect(chatWebhookPayloadProblems(post.body)).toEqual([]);
    const cardJson = JSON.stringify(post.body);
    expect(cardJson).toContain("Payments API returning 503");
    expect(cardJson).toContain("SEV2");
    expect(cardJson).toContain(JSON.stringify(text).slice(1, -1));
    expect(cardJson).toContain(`${PUBLIC_URL}/o/acme/incidents/${incidentId}`);
    expect(cardJson).not.toContain("Action.");
    // The label names the channel on the timeline only; the webhook decides where the card lands.
    expect(cardJson).not.toContain("#payments");
    const entry = (await timeline(incidentId)).find((e) => e.data?.messageId === messageId);
    expect(entry?.kind).toBe("update_sent");
    expect(entry?.data).toMatchObject({ state: "sent", label: "#payments", channel: "chatwebhook:#payments" });
    const second = await send(incidentId, messageId);
    expect(second.status).toBe(409);
    expect(postsWith(marker)).toHaveLength(1);
  });

  it("each message is sent at most once even when sends race", async () => {
    await setEgress(true);
    const marker = `race-${randomBytes(4).toString("hex")}`;
    const messageId = await approved(incidentId, marker);
    const answers = await Promise.all([send(incidentId, messageId), send(incidentId, messageId, memberSession), send(incidentId, messageId, owner)]);
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([200, 409, 409]);
    expect(postsWith(marker)).toHaveLength(1);
    const listed = await app.call("GET", messagesPath(incidentId), { token: memberKey });
    expect(listed.body.messages.find((m: { messageId: string }) => m.messageId === messageId).state).toBe("sent");
    const entries = (await timeline(incidentId)).filter((e) => e.data?.messageId === messageId);
    expect(entries).toHaveLength(1);
  });

  it("a refusal by the channel answers 503 Chat webhook HTTP <status>, on the timeline too, and is not retried", async () => {
    await setEgress(true);
    await saveConnection(receiver.url("gone", secret()));
    const marker = `refused-${randomBytes(4).toString("hex")}`;
    const messageId = await approved(incidentId, marker);
    const res = await send(incidentId, messageId);
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ error: "Chat webhook HTTP 404" });
    expect(postsWith(marker)).toHaveLength(1);
    const entry = (await timeline(incidentId)).find((e) => e.data?.messageId === messageId);
    expect(entry?.summary).toMatch(/^Chat webhook HTTP 404: update not delivered/);
    expect(entry?.data).toMatchObject({ state: "failed", error: "Chat webhook HTTP 404" });
    const listed = await app.call("GET", messagesPath(incidentId), { token: memberKey });
    expect(listed.body.messages.find((m: { messageId: string }) => m.messageId === messageId)).toMatchObject({
      state: "failed",
      error: "Chat webhook HTTP 404",
    });
    const again = await send(incidentId, messageId);
    expect(again.status).toBe(409);
    expect(again.body.error).toMatch(/already failed to send \(Chat webhook HTTP 404\)/);
    expect(postsWith(marker)).toHaveLength(1);
  });

  it("a legacy connector's throttling notice in a 200 body counts as the refusal it names", async () => {
    await setEgress(true);
    await saveConnection(receiver.url("legacy-throttled", secret()));
    const messageId = await approved(incidentId, "throttled update");
    const res = await send(incidentId, messageId);
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ error: "Chat webhook HTTP 429" });
  });

  it("a network failure, a timeout and a redirect each get a clear message; a redirect is never followed", async () => {
    await setEgress(true);
    const before = await chatWebhookCalls();
    await saveConnection(`https://127.0.0.1:${await closedPort()}/hooks/ok/${secret()}`);
    const refused = await send(incidentId, await approved(incidentId, "to a closed port"));
    expect(refused.status).toBe(503);
    expect(refused.body).toEqual({ error: "Chat webhook unreachable: connection refused (ECONNREFUSED)" });

    await saveConnection(receiver.url("slow", secret()));
    const started = Date.now();
    const slow = await send(incidentId, await approved(incidentId, "to a receiver that never answers"));
    expect(slow.status).toBe(503);
    expect(slow.body).toEqual({ error: "Chat webhook did not answer within 1.5 s" });
    // A hang detector (10 times the 1.5 s timeout): the receiver never answers.
    expect(Date.now() - started).toBeLessThan(15_000);

    await saveConnection(receiver.url("redirect", secret()));
    const redirected = await send(incidentId, await approved(incidentId, "to a redirecting receiver"));
    expect(redirected.status).toBe(503);
    expect(redirected.body).toEqual({ error: "Chat webhook HTTP 302" });
    expect(canary.connections()).toBe(0);
    // Each failure is counted under its own result for the WarroomChatWebhookFailures alert.
    const after = await chatWebhookCalls();
    for (const result of ["network", "timeout", "http_error"]) expect((after[result] ?? 0) - (before[result] ?? 0), result).toBe(1);
    expect(after.ok ?? 0).toBe(before.ok ?? 0);

    for (const e of (await timeline(incidentId)).filter((e) => e.data?.state === "failed")) {
      for (const s of savedSecrets) expect(JSON.stringify(e)).not.toContain(s);
    }
  });

  it("egress on without a connection answers 409 and the message stays approved", async () => {
    await setEgress(true);
    expect((await app.call("DELETE", CONNECTION, { token: owner })).status).toBe(204);
    const messageId = await approved(incidentId, "nowhere to go");
    const res = await send(incidentId, messageId);
    expect(res.status).toBe(409);
    expect(res.body.error).toMatch(/no chat-webhook connection is saved/);
    const listed = await app.call("GET", messagesPath(incidentId), { token: memberKey });
    expect(listed.body.messages.find((m: { messageId: string }) => m.messageId === messageId).state).toBe("approved");
    await saveConnection(receiver.url("ok", secret()));
    expect((await send(incidentId, messageId)).body).toEqual({ messageId, state: "sent" });
  });
});

describe("war-room link", () => {
  async function draftsOf(incidentId: string): Promise<{ messageId: string; version: string; body: string; state: string; channel: string }[]> {
    const res = await app.call("GET", messagesPath(incidentId), { token: memberKey });
    expect(res.status).toBe(200);
    return res.body.messages;
  }

  it("an incident opened from a chat message gets the war-room link drafted, and only drafted", async () => {
    await setEgress(true);
    await saveConnection(receiver.url("ok", secret()));
    const before = receiver.posts.length;
    const incidentId = await openIncident({ source: "chat", title: "Chat: checkout is down", severity: "sev2" });
    const link = `${PUBLIC_URL}/o/acme/incidents/${incidentId}`;
    const [offer] = await waitFor("the war-room link draft", async () => {
      const drafts = await draftsOf(incidentId);
      return drafts.length > 0 && drafts;
    });
    expect(offer).toMatchObject({ channel: "chatwebhook", state: "drafted", version: "1" });
    expect(offer!.body).toContain(link);
    expect(receiver.posts.length).toBe(before);
    // A person approves and sends it through the same path.
    const approve = await app.call("POST", `${messagesPath(incidentId)}/${offer!.messageId}/approve`, { token: memberKey, body: { version: "1" } });
    expect(approve.status).toBe(200);
    expect((await send(incidentId, offer!.messageId)).body).toEqual({ messageId: offer!.messageId, state: "sent" });
    const post = receiver.posts.at(-1)!;
    expect(chatWebhookPayloadProblems(post.body)).toEqual([]);
    expect(JSON.stringify(post.body)).toContain(link);
  });

  it("posts the chat message's text literally: markdown links and HTML from it are never live in the card", async () => {
    await setEgress(true);
    await saveConnection(receiver.url("ok", secret()));
    const title = 'Chat: checkout down [x](http://evil.example/md) <a href="http://evil.example/html">login</a> **now**';
    const incidentId = await openIncident({ source: "chat", title, severity: "sev2" });
    const [offer] = await waitFor("the war-room link draft", async () => {
      const drafts = await draftsOf(incidentId);
      return drafts.length > 0 && drafts;
    });
    const approve = await app.call("POST", `${messagesPath(incidentId)}/${offer!.messageId}/approve`, { token: memberKey, body: { version: "1" } });
    expect(approve.status).toBe(200);
    expect((await send(incidentId, offer!.messageId)).body).toEqual({ messageId: offer!.messageId, state: "sent" });
    const card = receiver.posts.at(-1)!.body as { attachments: { content: { body: { type: string; text?: string }[] } }[] };
    expect(chatWebhookPayloadProblems(card)).toEqual([]);
    // Only a TextBlock's text is read as markdown: none holds the message's text.
    const markdown = card.attachments[0]!.content.body.filter((e) => e.type === "TextBlock").map((e) => e.text ?? "");
    expect(markdown.join("\n")).not.toContain("evil.example");
    expect(JSON.stringify(card)).toContain("[x](http://evil.example/md)");
  });

  it("needs the same two people as any update when the organization requires a second approver", async () => {
    const SETTINGS = "/o/acme/comms/settings";
    await setEgress(true);
    await saveConnection(receiver.url("ok", secret()));
    expect((await app.call("PUT", SETTINGS, { token: owner, body: { requireSecondApprover: true } })).status).toBe(200);
    try {
      const incidentId = await openIncident({ source: "chat", title: "Chat: payments are failing", severity: "sev2" });
      const [offer] = await waitFor("the war-room link draft", async () => {
        const drafts = await draftsOf(incidentId);
        return drafts.length > 0 && drafts;
      });
      // Nobody wrote it: one person alone may not approve it.
      const alone = await app.call("POST", `${messagesPath(incidentId)}/${offer!.messageId}/approve`, { token: memberKey, body: { version: "1" } });
      expect(alone.status).toBe(403);
      expect(alone.body.error).toContain("drafted by warroom");
      // A person takes it on (edits it), and a second person approves it.
      const taken = await app.call("PATCH", `${messagesPath(incidentId)}/${offer!.messageId}`, {
        token: memberKey,
        body: { version: "1", body: offer!.body },
      });
      expect(taken.status).toBe(200);
      const own = await app.call("POST", `${messagesPath(incidentId)}/${offer!.messageId}/approve`, {
        token: memberKey,
        body: { version: taken.body.version },
      });
      expect(own.status).toBe(403);
      const second = await app.call("POST", `${messagesPath(incidentId)}/${offer!.messageId}/approve`, { token: owner, body: { version: taken.body.version } });
      expect(second.status).toBe(200);
    } finally {
      expect((await app.call("PUT", SETTINGS, { token: owner, body: { requireSecondApprover: false } })).status).toBe(200);
    }
  });

  it("no offer for other sources, nor without a connection", async () => {
    const fromMonitor = await openIncident({ source: "metrics-monitor" });
    expect((await app.call("DELETE", CONNECTION, { token: owner })).status).toBe(204);
    const fromChat = await openIncident({ source: "chat", title: "Chat: search is slow" });
    // Its opened event is handled (published only after every in-process handler ran) before the connection returns.
    await waitFor("the opened events to be handled", async () => {
      const [pending] = await sql<{ n: number }[]>`select count(*)::int as n from incidents.outbox where published_at is null`;
      return pending!.n === 0;
    });
    // A later chat incident with a connection proves the consumer has run past both events.
    await saveConnection(receiver.url("ok", secret()));
    const witness = await openIncident({ source: "chat", title: "Chat: login fails" });
    await waitFor("the witness draft", async () => (await draftsOf(witness)).length > 0);
    expect(await draftsOf(fromMonitor)).toEqual([]);
    expect(await draftsOf(fromChat)).toEqual([]);
  });
});

describe("the webhook URL at rest", () => {
  it("is stored encrypted under the configured key id; no comms table, outbox or audit entry holds it in clear", async () => {
    const key = secret();
    await saveConnection(receiver.url("ok", key));
    const [row] = await sql<{ key_id: string; url_ciphertext: Buffer }[]>`select key_id, url_ciphertext from comms.chat_connections`;
    expect(row!.key_id).toBe(KEY_ID);
    expect(row!.url_ciphertext.includes(Buffer.from(key))).toBe(false);
    expect(row!.url_ciphertext.includes(Buffer.from("127.0.0.1"))).toBe(false);

    const tables = await sql<{ table_name: string }[]>`select table_name from information_schema.tables where table_schema = 'comms'`;
    expect(tables.map((t) => t.table_name)).toEqual(expect.arrayContaining(["chat_connections", "messages", "egress_settings", "outbox"]));
    const dump: string[] = [];
    for (const { table_name } of tables) {
      // Every row as text, bytea columns included (hex), so a URL hidden in any column shows up.
      const rows = await sql.unsafe<{ row: string }[]>(`select t::text as row from comms.${table_name} t`);
      dump.push(...rows.map((r) => r.row));
      const bytes = await sql.unsafe<{ column_name: string }[]>(
        `select column_name from information_schema.columns where table_schema = 'comms' and table_name = $1 and data_type = 'bytea'`,
        [table_name],
      );
      for (const { column_name } of bytes) {
        const values = await sql.unsafe<{ v: Buffer | null }[]>(`select ${column_name} as v from comms.${table_name}`);
        dump.push(...values.map((v) => v.v?.toString("latin1") ?? ""));
      }
    }
    const audit = await sql<{ data: unknown }[]>`select data from identity.audit_events`;
    dump.push(...audit.map((a) => JSON.stringify(a.data)));
    const everything = dump.join("\n");
    expect(savedSecrets.length).toBeGreaterThan(10);
    for (const s of savedSecrets) expect(everything).not.toContain(s);
    expect(everything).not.toMatch(/https:\/\/127\.0\.0\.1:\d+\/hooks/);
  });
  it("a URL sealed under an older key still works and is sealed again under the first key on use", async () => {
    const key = secret();
    const sealed = createSecretBox(parseSecretKeys(OLD_KEY)).seal(receiver.url("ok", key), associatedData(orgId));
    await sql`update comms.chat_connections set key_id = ${sealed.keyId}, url_ciphertext = ${sealed.ciphertext} where org_id = ${orgId}`;
    const tested = await app.call("POST", `${CONNECTION}/test`, { token: owner });
    expect(tested.body).toEqual({ ok: true, error: null });
    expect(receiver.posts.at(-1)!.path).toContain(key);
    const [row] = await sql<{ key_id: string; url_ciphertext: Buffer }[]>`select key_id, url_ciphertext from comms.chat_connections where org_id = ${orgId}`;
    expect(row!.key_id).toBe(KEY_ID);
    expect(row!.url_ciphertext.equals(sealed.ciphertext)).toBe(false);
    // A value sealed for another organization does not open in this one's row.
    const foreign = createSecretBox(parseSecretKeys(OLD_KEY)).seal(receiver.url("ok", secret()), associatedData("00000000-0000-4000-8000-000000000001"));
    await sql`update comms.chat_connections set key_id = ${foreign.keyId}, url_ciphertext = ${foreign.ciphertext} where org_id = ${orgId}`;
    const posts = receiver.posts.length;
    const moved = await app.call("POST", `${CONNECTION}/test`, { token: owner });
    expect(moved.status).toBe(503);
    expect(moved.body.error).toMatch(/cannot be decrypted .*save the connection again/);
    expect(receiver.posts.length).toBe(posts);
    await saveConnection(receiver.url("ok", secret()));
  });
});
