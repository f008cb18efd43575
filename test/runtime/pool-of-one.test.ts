import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildRouteTable, matchRoute } from "../../services/gateway/route-table.js";
import { internalServices } from "../../services/runtime/transport/clients.js";
import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { makeTestCertificates, startChatWebhookReceiver, type ChatWebhookReceiver } from "../support/https-receiver.js";
import { createSourceServer } from "../../services/remotesource-kit/index.js";
import postgres from "postgres";
import { recordPendingTimelineEntries } from "../../services/comms/timeline.js";
import { createPostgresCommsStore } from "../../services/comms/store.js";
import { createClients } from "../../services/runtime/transport/clients.js";
import { callApi, OWNER, startApp, type TestApp } from "../support/app.js";

/**
 * The rule "no transaction is held across a call that can wait on another part of the system",
 * made checkable: with a pool of ONE database connection, a transaction held across a bus
 * publish, an RPC or a subscriber's work waits for a connection it is itself holding, and the
 * whole process freezes. Every public route and the background work (relay, audit consumer,
 * heartbeat sweep, war-room link) runs here, and every call must answer.
 *
 * BUDGET_MS is a hang detector, not a latency budget: a call takes tens of milliseconds, and a
 * frozen process answers only when some timeout of its own fires (seconds), or never.
 */
const BUDGET_MS = 8_000;
const routes = buildRouteTable(internalServices);
const covered = new Set<string>();

let app: TestApp;
let receiver: ChatWebhookReceiver;
let source: Awaited<ReturnType<ReturnType<typeof createSourceServer>["listen"]>>;
const SOURCE_TOKEN = `tok-${randomBytes(12).toString("hex")}`;

/** One call within the budget; the route it reached is counted as covered. */
async function call(
  method: string,
  path: string,
  options: { token?: string; body?: unknown; headers?: Record<string, string>; raw?: string } = {},
): Promise<{ status: number; body: any }> {
  const match = matchRoute(routes, method, path.split("?")[0]!);
  if (typeof match === "object") covered.add(match.route.method.name);
  const started = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${method} ${path} did not answer within ${BUDGET_MS} ms: the process is waiting on itself`)), BUDGET_MS);
  });
  try {
    const res = await Promise.race([callApi(app.url, method, path, options), timeout]);
    expect(Date.now() - started, `${method} ${path}`).toBeLessThan(BUDGET_MS);
    return res;
  } finally {
    clearTimeout(timer);
  }
}

/** Polls within the budget until `probe` returns a value. */
async function eventually<T>(what: string, probe: () => Promise<T | undefined | false>): Promise<T> {
  const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`never saw ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function expectStatus(res: { status: number; body: unknown }, status: number, what: string): void {
  expect({ what, status: res.status, body: res.status === status ? undefined : res.body }).toEqual({ what, status, body: undefined });
}

let certs: ReturnType<typeof makeTestCertificates>;

beforeAll(async () => {
  certs = makeTestCertificates();
  receiver = await startChatWebhookReceiver(certs);
  source = await createSourceServer({
    source: "pool-of-one",
    kinds: ["metrics"],
    auth: { bearerTokens: [SOURCE_TOKEN] },
    metrics: {
      list: async () => ({ raw: ["up"] }),
      range: async (c) => ({ raw: { expr: c.expr }, series: [{ label: "up", points: [{ t: Date.now(), v: 1 }] }] }),
    },
  }).listen();
});

afterAll(async () => {
  await receiver?.close();
  await source?.close();
});

describe.each(["one process", "over NATS"] as const)("a service with a pool of one database connection (%s)", (mode) => {
  beforeAll(async () => {
    covered.clear();
    app = await startApp({
      nats: mode === "over NATS",
      env: {
        DATABASE_POOL_SIZE: "1",
        HEARTBEAT_SWEEP_SECONDS: "1",
        SECRETS_KEYS: newSecretKeyEntry("pool-one"),
        EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
        // The remote source is on loopback over plain http, with a bearer token.
        REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.0/8",
        REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1",
        EGRESS_CA_FILE: certs.caFile,
      },
    });
  });

  afterAll(async () => {
    await app?.stop();
  });

  it("answers every public route and finishes its background work without ever waiting on itself", async () => {
    const login = await call("POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
    expectStatus(login, 200, "login");
    const owner: string = login.body.accessToken;
    const o = "/o/acme";

    // People and credentials (each audited through the identity service).
    const added = await call("POST", `${o}/members`, { token: owner, body: { email: "member@acme.test", password: "member password 1", role: "member" } });
    expectStatus(added, 201, "add member");
    expectStatus(await call("GET", `${o}/members`, { token: owner }), 200, "list members");
    const memberPath = `${o}/members/${added.body.id}`;
    expectStatus(await call("PATCH", memberPath, { token: owner, body: { role: "admin" } }), 200, "change a role");
    expectStatus(await call("PUT", `${memberPath}/password`, { token: owner, body: { password: "member password 2" } }), 204, "set a password");
    const memberLogin = await call("POST", "/auth/login", { body: { email: "member@acme.test", password: "member password 2", orgSlug: OWNER.org } });
    expectStatus(memberLogin, 200, "member login");
    expectStatus(
      await call("PUT", `${o}/me/password`, {
        token: memberLogin.body.accessToken,
        body: { currentPassword: "member password 2", newPassword: "member password 3" },
      }),
      204,
      "change own password",
    );
    const key = await call("POST", `${o}/api-keys`, { token: owner, body: { name: "pool" } });
    expectStatus(key, 201, "create api key");
    expectStatus(await call("GET", `${o}/api-keys`, { token: owner }), 200, "list api keys");
    expectStatus(await call("DELETE", `${o}/api-keys/${key.body.id}`, { token: owner }), 204, "delete api key");
    const ingest = await call("POST", `${o}/triggers/ingest-token`, { token: owner });
    expectStatus(ingest, 200, "ingest token");
    const chatSecret = await call("POST", `${o}/triggers/chat-secret`, { token: owner });
    expectStatus(chatSecret, 200, "chat secret");
    const routerSecret = await call("POST", `${o}/triggers/alertrouter-secret`, { token: owner });
    expectStatus(routerSecret, 200, "alert-router secret");

    // A chat-webhook connection first, so that a chat message that opens an incident gets its war-room link.
    expectStatus(
      await call("PUT", `${o}/integrations/chatwebhook/connections/default`, { token: owner, body: { webhookUrl: receiver.url("ok", "pool") } }),
      200,
      "save chat webhook",
    );
    expectStatus(await call("GET", `${o}/integrations/chatwebhook/connections/default`, { token: owner }), 200, "get chat webhook");
    expectStatus(await call("POST", `${o}/integrations/chatwebhook/connections/default/test`, { token: owner }), 200, "test chat webhook");
    expectStatus(await call("GET", `${o}/oncall/egress`, { token: owner }), 200, "get egress");
    expectStatus(await call("PUT", `${o}/oncall/egress`, { token: owner, body: { enabled: false } }), 200, "set egress");

    // Deliveries from every receiver.
    const triggered = readFileSync("test/fixtures/datadog/custom-body-triggered.json", "utf8");
    const opened = await call("POST", "/triggers", {
      headers: { authorization: `Bearer ${ingest.body.token}`, "content-type": "application/json" },
      raw: triggered,
    });
    expectStatus(opened, 201, "deliver");
    const incidentId: string = opened.body.incidentId;
    const repeat = await call("POST", "/triggers", {
      headers: { authorization: `Bearer ${ingest.body.token}`, "content-type": "application/json" },
      raw: triggered,
    });
    expect(repeat.body.outcome).toBe("attached");
    const firing = readFileSync("test/fixtures/alertmanager/webhook-v4-firing.json", "utf8");
    const routed = await call("POST", "/triggers/alertrouter", {
      headers: { "x-service-alertrouter-secret": routerSecret.body.secret, "content-type": "application/json" },
      raw: firing,
    });
    expectStatus(routed, 202, "deliver alert router");
    const unauthorized = await call("POST", "/triggers/alertrouter", {
      headers: { "x-service-alertrouter-secret": "wrong", "content-type": "application/json" },
      raw: firing,
    });
    expectStatus(unauthorized, 401, "alert router with a wrong secret (audited)");
    const chat = await call("POST", `/triggers/chat/acme`, {
      headers: { "x-service-chat-secret": chatSecret.body.secret },
      body: { channel_id: "C1", message_id: "pool-1", text: "checkout is down", author: "U1" },
    });
    expectStatus(chat, 201, "deliver chat");
    const chatIncident: string = chat.body.incidentId;

    // Incidents.
    expectStatus(await call("GET", `${o}/incidents?state=open`, { token: owner }), 200, "list incidents");
    expectStatus(await call("GET", `${o}/incidents/${incidentId}`, { token: owner }), 200, "get incident");
    expectStatus(await call("GET", `${o}/incidents/${incidentId}/timeline`, { token: owner }), 200, "timeline page");

    // Updates: the war-room link drafted by the consumer, then a draft of our own approved and sent.
    const links = await eventually("the war-room link draft", async () => {
      const res = await call("GET", `${o}/incidents/${chatIncident}/comms/messages`, { token: owner });
      expectStatus(res, 200, "list messages");
      return res.body.messages?.length > 0 ? res.body.messages : undefined;
    });
    expect(links[0].body).toContain("war room");
    const drafted = await call("POST", `${o}/incidents/${incidentId}/comms/messages`, {
      token: owner,
      body: { channel: "chatwebhook", body: "Investigating" },
    });
    expectStatus(drafted, 201, "draft");
    const messagePath = `${o}/incidents/${incidentId}/comms/messages/${drafted.body.messageId}`;
    const edited = await call("PATCH", messagePath, { token: owner, body: { version: drafted.body.version, body: "Investigating checkout" } });
    expectStatus(edited, 200, "edit draft");
    expectStatus(await call("GET", `${o}/comms/settings`, { token: owner }), 200, "comms settings");
    expectStatus(await call("PUT", `${o}/comms/settings`, { token: owner, body: { requireSecondApprover: false } }), 200, "set comms settings");
    expectStatus(await call("POST", `${messagePath}/approve`, { token: owner, body: { version: edited.body.version } }), 200, "approve");
    const discardable = await call("POST", `${o}/incidents/${incidentId}/comms/messages`, {
      token: owner,
      body: { channel: "chatwebhook", body: "Never mind" },
    });
    expectStatus(await call("DELETE", `${o}/incidents/${incidentId}/comms/messages/${discardable.body.messageId}`, { token: owner }), 204, "discard draft");
    const sent = await call("POST", `${messagePath}/send`, { token: owner });
    expectStatus(sent, 200, "send");
    expect(sent.body.state).toBe("simulated");

    // The comms sweep that writes timeline entries the incident core missed: it calls the incident
    // core for each row, through the same pool of one (the row is made pending from outside).
    const outside = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    try {
      await outside`update comms.messages set timeline_recorded = false, finished_at = now() - interval '1 hour' where id = ${drafted.body.messageId}`;
    } finally {
      await outside.end();
    }
    const commsOutbox = app.process.relays[app.process.modules.findIndex((m) => m.name === "comms")]!;
    const comms = {
      store: createPostgresCommsStore({ sql: app.process.database.sql, outbox: commsOutbox }),
      clients: createClients(app.process.transport),
      logger: app.process.logger,
    };
    const recorded = await Promise.race([
      recordPendingTimelineEntries(comms, 60),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error("the timeline sweep waited on itself")), BUDGET_MS)),
    ]);
    expect(recorded).toBe(1);

    expectStatus(await call("PATCH", `${o}/incidents/${incidentId}`, { token: owner, body: { severity: "sev1" } }), 200, "change severity");
    expectStatus(await call("POST", `${o}/incidents/${incidentId}/acknowledge`, { token: owner }), 200, "acknowledge");
    const ownMember = (await call("GET", `${o}/members`, { token: owner })).body.members[0].id;
    expectStatus(await call("PUT", `${o}/incidents/${incidentId}/owner`, { token: owner, body: { ownerId: ownMember } }), 200, "set owner");
    expectStatus(await call("POST", `${o}/incidents/${incidentId}/notes`, { token: owner, body: { text: "Restarted the pods" } }), 201, "add note");
    expectStatus(await call("GET", `${o}/incidents?severity=sev1,sev2&acknowledged=yes&sort=activity&q=a&limit=1`, { token: owner }), 200, "list with filters");
    expectStatus(
      await call("POST", `${o}/incidents:bulk`, { token: owner, body: { filter: { state: "open", recovered: "yes" }, action: "resolve", limit: 1 } }),
      200,
      "bulk resolve",
    );
    expectStatus(await call("POST", `${o}/incidents/${incidentId}/resolve`, { token: owner }), 200, "resolve");
    expectStatus(await call("POST", `${o}/incidents/${incidentId}/archive`, { token: owner }), 200, "archive");

    // Maintenance windows, and a suppressed delivery (audited through the intake outbox).
    const now = Date.now();
    const window = await call("POST", `${o}/maintenance-windows`, {
      token: owner,
      body: { startsAt: new Date(now - 60_000).toISOString(), endsAt: new Date(now + 3600_000).toISOString(), reason: "deploy" },
    });
    expectStatus(window, 201, "create maintenance window");
    expectStatus(await call("GET", `${o}/maintenance-windows`, { token: owner }), 200, "list maintenance windows");
    const suppressed = await call("POST", "/triggers", {
      headers: { authorization: `Bearer ${ingest.body.token}`, "content-type": "application/json" },
      raw: triggered,
    });
    expect(suppressed.body.outcome).toBe("suppressed");
    expectStatus(await call("POST", `${o}/maintenance-windows/${window.body.id}/end`, { token: owner }), 200, "end maintenance window");
    expectStatus(await call("GET", `${o}/maintenance-windows?state=past`, { token: owner }), 200, "list past maintenance windows");
    expectStatus(await call("GET", `${o}/audit-events?kind=maintenance_window.`, { token: owner }), 200, "filtered audit log");
    expectStatus(await call("DELETE", `${o}/maintenance-windows/${window.body.id}`, { token: owner }), 204, "delete maintenance window");
    expectStatus(
      await call("PUT", `${o}/escalation`, { token: owner, body: { severities: [{ severity: "sev1", minutes: [5, 15, 30] }] } }),
      200,
      "set escalation policy",
    );
    expectStatus(await call("GET", `${o}/escalation`, { token: owner }), 200, "read escalation policy");

    // The PagerDuty and Opsgenie drop-in receivers: trigger, acknowledge, resolve, change; create,
    // acknowledge, close and the request status Opsgenie clients poll.
    const pd = (path: string, body: unknown) => call("POST", path, { body });
    const pdEvent = { routing_key: ingest.body.token, dedup_key: "pool-pd", payload: { summary: "Disk full on db-1", source: "db-1", severity: "critical" } };
    expectStatus(await pd("/v2/enqueue", { ...pdEvent, event_action: "trigger" }), 202, "PagerDuty trigger");
    expectStatus(await pd("/v2/enqueue", { routing_key: ingest.body.token, dedup_key: "pool-pd", event_action: "acknowledge" }), 202, "PagerDuty acknowledge");
    expectStatus(await pd("/v2/enqueue", { routing_key: ingest.body.token, dedup_key: "pool-pd", event_action: "resolve" }), 202, "PagerDuty resolve");
    expectStatus(
      await pd("/v2/change/enqueue", { routing_key: ingest.body.token, payload: { summary: "Deployed db 1.2", source: "ci" } }),
      202,
      "PagerDuty change",
    );
    expectStatus(
      await pd("/generic/2010-04-15/create_event.json", {
        service_key: ingest.body.token,
        event_type: "trigger",
        incident_key: "pool-pd-v1",
        description: "Disk full on db-2",
      }),
      200,
      "PagerDuty v1 trigger",
    );
    const genie = { authorization: `GenieKey ${ingest.body.token}` };
    const genieCreated = await call("POST", "/v2/alerts", { headers: genie, body: { message: "Queue backlog", alias: "pool-og" } });
    expectStatus(genieCreated, 202, "Opsgenie create");
    expectStatus(await call("POST", "/v2/alerts/pool-og/acknowledge?identifierType=alias", { headers: genie, body: {} }), 202, "Opsgenie acknowledge");
    expectStatus(await call("POST", "/v2/alerts/pool-og/close?identifierType=alias", { headers: genie, body: {} }), 202, "Opsgenie close");
    expectStatus(await call("GET", `/v2/alerts/requests/${genieCreated.body.requestId}`, { headers: genie }), 200, "Opsgenie request status");

    // Heartbeats: registered, silent (the sweep opens an incident), pinged (resumed), changed, deleted.
    expectStatus(
      await call("POST", `${o}/heartbeats`, { token: owner, body: { name: "pool-job", expectedIntervalSeconds: 1, graceSeconds: 1 } }),
      201,
      "register heartbeat",
    );
    expectStatus(await call("GET", `${o}/heartbeats`, { token: owner }), 200, "list heartbeats");
    expectStatus(await call("GET", `${o}/heartbeats/pool-job`, { token: owner }), 200, "get heartbeat");
    await eventually("the heartbeat's silence incident", async () => {
      const res = await call("GET", `${o}/incidents?state=open`, { token: owner });
      return res.body.incidents.find((i: { source: string }) => i.source === "heartbeat");
    });
    expectStatus(await call("POST", `${o}/heartbeats/pool-job/ping`, { headers: { authorization: `Bearer ${ingest.body.token}` } }), 204, "ping");
    const run = "0b5a6c9e-51f4-4c1e-9d0e-2f0a3d5b7c11";
    const signal = (name: string, raw = "") =>
      call("POST", `${o}/heartbeats/pool-job/ping/${name}?run_id=${run}`, {
        headers: { authorization: `Bearer ${ingest.body.token}`, "content-type": "text/plain" },
        raw,
      });
    expectStatus(await signal("start"), 204, "ping start");
    expectStatus(await signal("fail", "backup failed: disk full"), 204, "ping fail");
    expectStatus(await signal("0"), 204, "ping exit status 0");
    expectStatus(await call("GET", `${o}/heartbeats/pool-job/pings`, { token: owner }), 200, "ping history");
    // Healthchecks' ping URLs (the heartbeat's own key, and the organization's key with a slug),
    // and Opsgenie's heartbeat ping.
    const beat = await call("GET", `${o}/heartbeats/pool-job`, { token: owner });
    const pingPath = new URL(beat.body.pingUrl).pathname;
    expectStatus(await call("GET", pingPath), 200, "ping by key");
    expectStatus(await call("POST", `${pingPath}/start`, { headers: { "content-type": "text/plain" }, raw: "" }), 200, "ping by key, start");
    expectStatus(await call("POST", `${o}/heartbeats/pool-job/rotate-ping-key`, { token: owner }), 200, "rotate ping key");
    const orgKey = await call("POST", `${o}/ping-key`, { token: owner, body: {} });
    expectStatus(orgKey, 200, "issue the organization's ping key");
    expectStatus(await call("GET", `/ping/${orgKey.body.pingKey}/pool-job/0`), 200, "ping by the organization's key");
    expectStatus(await call("GET", "/v2/heartbeats/pool-job/ping", { headers: genie }), 202, "Opsgenie heartbeat ping");
    expectStatus(await call("PATCH", `${o}/heartbeats/pool-job`, { token: owner, body: { expectedIntervalSeconds: 3600 } }), 200, "update heartbeat");
    expectStatus(await call("DELETE", `${o}/heartbeats/pool-job`, { token: owner }), 204, "delete heartbeat");

    // Custom sources: a source with its own credential, delivered to by header and by path, its
    // log, kept payloads and preview; grouping overrides and configuration as code.
    expectStatus(await call("GET", `${o}/custom-source-presets`, { token: owner }), 200, "list custom-source presets");
    const custom = await call("POST", `${o}/custom-sources`, {
      token: owner,
      body: { name: "pool-script", rules: [{ name: "every", when: "true", title: "body.title" }], auth: { secretInPath: true } },
    });
    expectStatus(custom, 201, "create custom source");
    const customPath = `${o}/custom-sources/${custom.body.source.id}`;
    const customDelivery = await call("POST", `/triggers/custom/${custom.body.source.id}`, {
      headers: { authorization: `Bearer ${custom.body.credential.secret}` },
      body: { title: "Nightly export failed" },
    });
    expectStatus(customDelivery, 201, "deliver to a custom source");
    expectStatus(
      await call("POST", new URL(custom.body.credential.pathUrl).pathname, { body: { title: "Nightly export failed" } }),
      201,
      "deliver to a custom source with the secret in the path",
    );
    expectStatus(await call("GET", `${o}/custom-sources`, { token: owner }), 200, "list custom sources");
    expectStatus(await call("GET", customPath, { token: owner }), 200, "get custom source");
    expectStatus(await call("PATCH", customPath, { token: owner, body: { name: "pool-script-2" } }), 200, "update custom source");
    expectStatus(await call("GET", `${customPath}/deliveries`, { token: owner }), 200, "custom-source delivery log");
    expectStatus(await call("GET", `${customPath}/payloads`, { token: owner }), 200, "custom-source kept payloads");
    expectStatus(await call("POST", `${customPath}/preview`, { token: owner, body: { body: { title: "Preview" } } }), 200, "preview");
    expectStatus(await call("POST", `${customPath}/credential`, { token: owner }), 200, "rotate custom-source credential");
    expectStatus(await call("DELETE", `${customPath}/credential`, { token: owner }), 204, "revoke custom-source credential");
    expectStatus(await call("PUT", `${o}/grouping-overrides/metrics-monitor`, { token: owner, body: { windowHours: 12 } }), 200, "put grouping override");
    expectStatus(await call("GET", `${o}/grouping-overrides`, { token: owner }), 200, "list grouping overrides");
    expectStatus(await call("PUT", `${o}/correlation`, { token: owner, body: { mode: "link", windowMinutes: 30 } }), 200, "set correlation");
    expectStatus(await call("GET", `${o}/correlation`, { token: owner }), 200, "get correlation");
    const exported = await call("GET", `${o}/config`, { token: owner });
    expectStatus(exported, 200, "export configuration");
    expectStatus(await call("POST", `${o}/config`, { token: owner, body: { yaml: exported.body.yaml, dryRun: true } }), 200, "apply configuration (dry run)");
    expectStatus(await call("DELETE", `${o}/grouping-overrides/metrics-monitor`, { token: owner }), 204, "delete grouping override");
    expectStatus(await call("DELETE", `${o}/correlation`, { token: owner }), 204, "turn correlation off");
    expectStatus(await call("DELETE", customPath, { token: owner }), 204, "delete custom source");

    // Event subscriptions: created, tested, its log read, redelivered, rotated, changed, deleted.
    const subscription = await call("POST", `${o}/subscriptions`, {
      token: owner,
      body: { url: receiver.url("ok", "pool-subscription"), events: ["incident.opened"], description: "pool" },
    });
    expectStatus(subscription, 201, "create subscription");
    const subscriptionPath = `${o}/subscriptions/${subscription.body.id}`;
    expectStatus(await call("GET", `${o}/subscriptions`, { token: owner }), 200, "list subscriptions");
    expectStatus(await call("GET", subscriptionPath, { token: owner }), 200, "get subscription");
    expectStatus(await call("POST", `${subscriptionPath}/test`, { token: owner }), 200, "send a test event");
    // An incident opened now reaches the subscription through the domain events (simulated: real
    // egress is off), and can be sent again.
    const announced = await call("POST", `/triggers/chat/acme`, {
      headers: { "x-service-chat-secret": chatSecret.body.secret },
      body: { channel_id: "C1", message_id: "pool-2", text: "search is down", author: "U1" },
    });
    expectStatus(announced, 201, "deliver chat for the subscription");
    const announcedDelivery = await eventually("the subscription's incident.opened delivery", async () => {
      const res = await call("GET", `${subscriptionPath}/deliveries`, { token: owner });
      expectStatus(res, 200, "subscription delivery log");
      return res.body.deliveries.find((d: { eventType: string }) => d.eventType === "incident.opened");
    });
    expectStatus(await call("POST", `${subscriptionPath}/deliveries/${announcedDelivery.webhookId}/redeliver`, { token: owner }), 200, "redeliver one event");
    expectStatus(
      await call("POST", `${subscriptionPath}/redeliver`, { token: owner, body: { since: new Date(now - 3600_000).toISOString() } }),
      200,
      "redeliver since",
    );
    expectStatus(await call("POST", `${subscriptionPath}/rotate-secret`, { token: owner }), 200, "rotate subscription secret");
    expectStatus(await call("PATCH", subscriptionPath, { token: owner, body: { description: "pool, changed" } }), 200, "update subscription");
    expectStatus(await call("DELETE", subscriptionPath, { token: owner }), 204, "delete subscription");

    // Remote sources (audited through the remote-source outbox).
    const created = await call("POST", `${o}/remote-sources`, {
      token: owner,
      body: { name: "pool-source", baseUrl: `${source.url}/`, transport: "http", auth: { bearerToken: SOURCE_TOKEN }, tenantRef: "tenant-pool" },
    });
    expectStatus(created, 201, "create remote source");
    const sourcePath = `${o}/remote-sources/${created.body.id}`;
    expectStatus(await call("GET", `${o}/remote-sources`, { token: owner }), 200, "list remote sources");
    expectStatus(await call("GET", sourcePath, { token: owner }), 200, "get remote source");
    expectStatus(await call("PATCH", sourcePath, { token: owner, body: { name: "pool-source-2" } }), 200, "update remote source");
    expectStatus(await call("POST", `${sourcePath}/test`, { token: owner }), 200, "test remote source");
    expectStatus(await call("POST", `${sourcePath}/read`, { token: owner, body: { call: "metrics/list", request: {} } }), 200, "read remote source");
    expectStatus(
      await call("PUT", `${sourcePath}/investigation-reads`, {
        token: owner,
        body: { reads: [{ name: "pool read", call: "metrics/range", template: "'up'" }] },
      }),
      200,
      "set investigation reads",
    );
    expectStatus(await call("POST", `${o}/incidents/${chatIncident}/investigate`, { token: owner }), 200, "investigate again");
    expectStatus(await call("GET", `${o}/incidents/${chatIncident}/evidence`, { token: owner }), 200, "list evidence");
    expectStatus(await call("DELETE", sourcePath, { token: owner }), 204, "delete remote source");
    expectStatus(await call("DELETE", `${o}/integrations/chatwebhook/connections/default`, { token: owner }), 204, "delete chat webhook");

    // The audit consumer recorded what went through the outboxes.
    const audited = await eventually("the audit records written through the outboxes", async () => {
      const res = await call("GET", `${o}/audit-events`, { token: owner });
      expectStatus(res, 200, "list audit events");
      const kinds = new Set<string>(res.body.events.map((e: { kind: string }) => e.kind));
      const wanted = ["heartbeat.registered", "heartbeat.deleted", "trigger.suppressed", "remote_source.deleted", "comms.chatwebhook.deleted"];
      return wanted.every((k) => kinds.has(k)) ? kinds : undefined;
    });
    expect(audited.size).toBeGreaterThan(5);
    // Background work (the sweep, pings' events) may still be writing: every outbox drains.
    await eventually("every outbox drained", async () => {
      const lag = await app.process.relays.reduce(async (sum, relay) => (await sum) + (await relay.lagSeconds()), Promise.resolve(0));
      return lag === 0 ? true : undefined;
    });

    expectStatus(await call("DELETE", memberPath, { token: owner }), 204, "remove a member");
    expectStatus(await call("GET", "/readyz"), 200, "readyz");
    expectStatus(await call("POST", "/auth/logout", { token: owner }), 204, "logout");

    const missed = routes.map((r) => r.method.name).filter((name) => !covered.has(name));
    expect(missed).toEqual([]);
  }, 180_000);
});
