import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import type postgres from "postgres";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Webhook } from "standardwebhooks";
import { IncidentOpenedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { SubscriptionsService } from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { TestApp } from "../../test/support/app.js";
import { createPrometheusFilesSource } from "../remotesource-kit/examples/prometheus-files/source.js";
import { startFakePrometheus } from "../remotesource-kit/testing/fake-prometheus.js";
import { startSubscriptionsHarness, type SubscriptionsHarness } from "./testing/harness.js";
import type { WebhookReceiver } from "./testing/webhook-receiver.js";
import { fromIncidentOpened } from "./event-types.js";
import { fanOut } from "./fan-out.js";

const PUBLIC_URL = "https://warroom.example.test";
const BASE = "/o/acme/subscriptions";

let app: TestApp;
let receiver: WebhookReceiver;
let clients: Clients;
let orgId: string;
let owner: string;
let memberKey: string;
let sql: postgres.Sql;

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function setEgress(enabled: boolean): Promise<void> {
  const res = await app.call("PUT", "/o/acme/oncall/egress", { token: owner, body: { enabled } });
  expect(res.status).toBe(200);
}

async function openIncident(title = "Checkout error rate above 5%"): Promise<string> {
  const response = await clients.incidents.record({
    orgId,
    orgSlug: "acme",
    alert: { source: "metrics-monitor", attachIdentity: `subs-${randomBytes(6).toString("hex")}`, kind: "alert", title, severity: "sev2", summary: "7.3%" },
  });
  expect(response.outcome).toBe("opened");
  return response.incident!.id;
}

/** Creates a subscription to `events` at a fresh receiver endpoint that verifies with its secret. */
async function subscribe(events: string[], name = `ep-${randomBytes(4).toString("hex")}`): Promise<{ id: string; secret: string; name: string }> {
  receiver.endpoint(name, []);
  const res = await app.call("POST", BASE, { token: owner, body: { url: receiver.url(name), events, description: name } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  receiver.setSecrets(name, [res.body.secret]);
  return { id: res.body.id, secret: res.body.secret, name };
}

const received = (name: string) => receiver.deliveries.filter((d) => d.endpoint === name);

let harness: SubscriptionsHarness;

beforeAll(async () => {
  harness = await startSubscriptionsHarness({
    env: {
      PUBLIC_URL,
      SUBSCRIPTION_TIMEOUT_SECONDS: "2",
      // Short, but long enough that a post slowed past the timeout on a busy machine is retried
      // rather than given up.
      SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: "0.1,0.2,0.4,0.8,1.6,3.2",
      SUBSCRIPTION_DISABLE_AFTER_SECONDS: "3600",
      // The example remote source of the investigation test listens on loopback over plain HTTP.
      REMOTE_SOURCE_ALLOW_CIDRS: "127.0.0.1/32",
      REMOTE_SOURCE_HTTP_BEARER_HOSTS: "127.0.0.1",
    },
  });
  ({ app, receiver, sql, clients, orgId, owner } = harness);
  const added = await app.call("POST", "/o/acme/members", { token: owner, body: { email: "m@acme.test", password: "member password 1", role: "member" } });
  expect(added.status).toBe(201);
  const login = await app.call("POST", "/auth/login", { body: { email: "m@acme.test", password: "member password 1", orgSlug: "acme" } });
  const key = await app.call("POST", "/o/acme/api-keys", { token: login.body.accessToken, body: { name: "subs test" } });
  memberKey = key.body.key;
});

afterAll(() => harness?.stop());

describe("subscriptions: an organization's first subscription", () => {
  // First in the file: the organization has no subscription yet.
  it("receives the next event, after the fan-out has found none for the organization's earlier events", async () => {
    await openIncident("Before any subscription");
    // The event has left the outbox and reached the fan-out, which found no subscription.
    await waitFor("the outbox drained", async () => (await sql`select 1 from incidents.outbox limit 1`).length === 0);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const sub = await subscribe(["incident.opened"]);
    const incidentId = await openIncident("After the first subscription");
    await waitFor("the opened event", () => received(sub.name).some((d) => d.event.data.incidentId === incidentId));
  });
});

describe("subscriptions: the routes", () => {
  it("creates a subscription, shows its whsec_ secret once, and never again", async () => {
    receiver.endpoint("shown-once", []);
    const created = await app.call("POST", BASE, {
      token: owner,
      body: { url: receiver.url("shown-once"), events: ["incident.opened", "incident.resolved"], description: "pager" },
    });
    expect(created.status).toBe(201);
    expect(created.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(created.body.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.body.subscription).toMatchObject({
      id: created.body.id,
      url: receiver.url("shown-once"),
      events: ["incident.opened", "incident.resolved"],
      state: "enabled",
    });

    const got = await app.call("GET", `${BASE}/${created.body.id}`, { token: memberKey });
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id: created.body.id, description: "pager", state: "enabled" });
    const list = await app.call("GET", BASE, { token: memberKey });
    expect(list.body.subscriptions.map((s: { id: string }) => s.id)).toContain(created.body.id);
    const secretPart = created.body.secret.slice(6);
    expect(JSON.stringify(got.body)).not.toContain(secretPart);
    expect(JSON.stringify(list.body)).not.toContain(secretPart);
    // The audit log is written from the outbox, a moment after the answer.
    const audit = await waitFor("the audit event", async () => {
      const res = await app.call("GET", "/o/acme/audit-events", { token: owner });
      return res.body.events.some((e: { kind: string }) => e.kind === "subscriptions.subscription.created") && res.body;
    });
    expect(JSON.stringify(audit)).not.toContain(secretPart);
  });

  it("refuses plain http, unknown event types, no events, and members", async () => {
    const http = await app.call("POST", BASE, { token: owner, body: { url: "http://127.0.0.1:9/x", events: ["incident.opened"] } });
    expect(http.status).toBe(400);
    expect(http.body.error).toBe("url must be an https URL: plain http and other schemes are refused");
    const unknown = await app.call("POST", BASE, { token: owner, body: { url: receiver.url("x"), events: ["incident.exploded"] } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatch(/^unknown event type "incident.exploded"/);
    const none = await app.call("POST", BASE, { token: owner, body: { url: receiver.url("x"), events: [] } });
    expect(none.status).toBe(400);
    const member = await app.call("POST", BASE, { token: memberKey, body: { url: receiver.url("x"), events: ["incident.opened"] } });
    expect(member.status).toBe(403);
    const anonymous = await app.call("GET", BASE);
    expect(anonymous.status).toBe(401);
    const missing = await app.call("GET", `${BASE}/00000000-0000-4000-8000-000000000000`, { token: owner });
    expect(missing.status).toBe(404);
  });

  it("answers the same over Connect and gRPC as over REST", async () => {
    const { id } = await subscribe(["incident.opened"]);
    for (const transport of [createConnectTransport({ baseUrl: app.url, httpVersion: "1.1" }), createGrpcTransport({ baseUrl: app.url })]) {
      const client = createClient(SubscriptionsService, transport);
      const headers = { authorization: `Bearer ${owner}` };
      const got = await client.getSubscription({ org: "acme", id }, { headers });
      expect(got.id).toBe(id);
      const listed = await client.listSubscriptions({ org: "acme" }, { headers });
      expect(listed.subscriptions.some((s) => s.id === id)).toBe(true);
      await expect(client.createSubscription({ org: "acme", url: "http://example.com/", events: ["incident.opened"] }, { headers })).rejects.toThrow(
        /https URL/,
      );
    }
  });

  it("shows members the URL without its query, where a receiver may keep a token", async () => {
    receiver.endpoint("with-query", []);
    const url = `${receiver.url("with-query")}?token=receiver-own-token`;
    const created = await app.call("POST", BASE, { token: owner, body: { url, events: ["incident.opened"] } });
    expect(created.status).toBe(201);
    expect((await app.call("GET", `${BASE}/${created.body.id}`, { token: owner })).body.url).toBe(url);
    const asMember = await app.call("GET", `${BASE}/${created.body.id}`, { token: memberKey });
    expect(asMember.body.url).toBe(`${receiver.url("with-query")}?…`);
    const list = await app.call("GET", BASE, { token: memberKey });
    expect(JSON.stringify(list.body)).not.toContain("receiver-own-token");
    await app.call("DELETE", `${BASE}/${created.body.id}`, { token: owner });
  });

  it("updates, disables and deletes; a deleted subscription is gone", async () => {
    const { id } = await subscribe(["incident.opened"]);
    const updated = await app.call("PATCH", `${BASE}/${id}`, { token: owner, body: { events: ["incident.repeat"], description: "changed", enabled: false } });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ events: ["incident.repeat"], description: "changed", state: "disabled" });
    const enabled = await app.call("PATCH", `${BASE}/${id}`, { token: owner, body: { enabled: true } });
    expect(enabled.body.state).toBe("enabled");
    expect(enabled.body.disabledReason).toBeNull();
    const deleted = await app.call("DELETE", `${BASE}/${id}`, { token: owner });
    expect(deleted.status).toBe(204);
    expect((await app.call("GET", `${BASE}/${id}`, { token: owner })).status).toBe(404);
  });

  it("leaves no delivery of a subscription deleted while a storm's events are being queued for it", async () => {
    const control = await subscribe(["incident.opened"]);
    const doomed = await Promise.all(Array.from({ length: 6 }, () => subscribe(["incident.opened"])));
    const INCIDENTS = 120;
    const opened: string[] = [];
    const storm = (async () => {
      for (let i = 0; i < INCIDENTS; i += 10) opened.push(...(await Promise.all(Array.from({ length: 10 }, () => openIncident("Deleted mid-storm")))));
    })();
    // Each deletion once the fan-out has started queueing for it, so it races a fan-out in flight.
    for (const sub of doomed) {
      await waitFor("a delivery queued for the subscription", async () => {
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from subscriptions.deliveries where subscription_id = ${sub.id}`;
        return row!.n > 0;
      });
      expect((await app.call("DELETE", `${BASE}/${sub.id}`, { token: owner })).status).toBe(204);
    }
    await storm;
    // Every event fanned out: the control subscription has them all.
    await waitFor(
      "every event queued for the control subscription",
      async () => {
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from subscriptions.deliveries where subscription_id = ${control.id}`;
        return row!.n === INCIDENTS;
      },
      60_000,
    );
    const [left] = await sql<{ n: number }[]>`
      select count(*)::int as n from subscriptions.deliveries where subscription_id = any(${doomed.map((d) => d.id)}::uuid[])`;
    expect(left!.n).toBe(0);
    expect(opened).toHaveLength(INCIDENTS);
    expect((await app.call("DELETE", `${BASE}/${control.id}`, { token: owner })).status).toBe(204);
  }, 120_000);

  it("queues an event that reaches the fan-out twice once, with the webhook-id of the first time", async () => {
    const sub = await subscribe(["incident.opened"]);
    const incidentId = await openIncident("Fanned out twice");
    const [first] = await waitFor("the delivery queued", async () => {
      const rows = await sql<{ id: string; event_id: string }[]>`
        select id, event_id from subscriptions.deliveries where subscription_id = ${sub.id} and payload like ${`%${incidentId}%`}`;
      return rows.length > 0 && rows;
    });
    // As a redelivered domain event (a lost acknowledgement, a restarted consumer) reaches it.
    const event = fromIncidentOpened(PUBLIC_URL, create(IncidentOpenedSchema, { orgId, incidentId, title: "Fanned out twice" }));
    await fanOut({ sql, pokeWorker() {} }, [{ event, eventId: first!.event_id }]);
    const rows = await sql<{ id: string }[]>`select id from subscriptions.deliveries where subscription_id = ${sub.id} and event_id = ${first!.event_id}`;
    expect(rows).toEqual([{ id: first!.id }]);
  });
});

describe("subscriptions: signed delivery", () => {
  it("delivers incident.opened signed to the Standard Webhooks specification, never on the request path", async () => {
    const sub = await subscribe(["incident.opened"]);
    const incidentId = await openIncident("Signed delivery check");
    const [delivery] = await waitFor("the opened event", () => {
      const got = received(sub.name).filter((d) => d.event.data.incidentId === incidentId);
      return got.length > 0 && got;
    });
    expect(delivery!.verified).toBe(true);
    // As an independent receiver: the library verifies and returns the payload.
    const payload = new Webhook(sub.secret).verify(delivery!.body, {
      "webhook-id": delivery!.webhookId,
      "webhook-timestamp": delivery!.timestamp,
      "webhook-signature": delivery!.signature,
    }) as { type: string; data: Record<string, unknown> };
    expect(payload.type).toBe("incident.opened");
    expect(payload.data).toMatchObject({
      org: "acme",
      incidentId,
      kind: "opened",
      title: "Signed delivery check",
      severity: "sev2",
      source: "metrics-monitor",
      workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${incidentId}`,
    });
    expect(delivery!.webhookId).toMatch(/^msg_/);
    // A wrong secret does not verify.
    expect(() =>
      new Webhook(`whsec_${randomBytes(32).toString("base64")}`).verify(delivery!.body, {
        "webhook-id": delivery!.webhookId,
        "webhook-timestamp": delivery!.timestamp,
        "webhook-signature": delivery!.signature,
      }),
    ).toThrow();
    // The receiver answered before the outcome was written: the log says so a moment later.
    const entry = await waitFor("the log to say delivered", async () => {
      const log = await app.call("GET", `${BASE}/${sub.id}/deliveries`, { token: memberKey });
      expect(log.status).toBe(200);
      const found = log.body.deliveries.find((d: { webhookId: string }) => d.webhookId === delivery!.webhookId);
      return found?.state !== "delivering" && found;
    });
    expect(entry).toMatchObject({ eventType: "incident.opened", state: "delivered", attemptCount: 1 });
    expect(entry.attempts[0]).toMatchObject({ status: 204, outcome: "delivered" });
    expect(entry.attempts[0].latencyMs).toBeGreaterThanOrEqual(0);
  });

  it("delivers repeat, resolved and archived events to the types subscribed, and nothing else", async () => {
    const sub = await subscribe(["incident.repeat", "incident.resolved", "incident.archived"]);
    const identity = `subs-${randomBytes(6).toString("hex")}`;
    const alert = { source: "metrics-monitor", attachIdentity: identity, kind: "alert", title: "Repeat me", severity: "sev3", summary: "x" };
    const first = await clients.incidents.record({ orgId, orgSlug: "acme", alert });
    await clients.incidents.record({ orgId, orgSlug: "acme", alert });
    const incidentId = first.incident!.id;
    expect((await app.call("POST", `/o/acme/incidents/${incidentId}/resolve`, { token: owner })).status).toBe(200);
    expect((await app.call("POST", `/o/acme/incidents/${incidentId}/archive`, { token: owner })).status).toBe(200);
    const types = await waitFor("three events", () => {
      const got = received(sub.name).filter((d) => d.event.data.incidentId === incidentId);
      return got.length >= 3 && got.map((d) => d.event.type).sort();
    });
    expect(types).toEqual(["incident.archived", "incident.repeat", "incident.resolved"]);
    expect(received(sub.name).every((d) => d.verified)).toBe(true);
  });

  it("delivers comms.update_sent when an approved update is sent", async () => {
    const sub = await subscribe(["comms.update_sent"]);
    receiver.endpoint("chat-channel", [], () => ({ status: 202 }));
    expect(
      (await app.call("PUT", "/o/acme/integrations/chatwebhook/connections/default", { token: owner, body: { webhookUrl: receiver.url("chat-channel") } }))
        .status,
    ).toBe(200);
    const incidentId = await openIncident("Update me");
    const messages = `/o/acme/incidents/${incidentId}/comms/messages`;
    const drafted = await app.call("POST", messages, { token: memberKey, body: { channel: "chatwebhook", body: "Rolled back." } });
    expect(
      (await app.call("POST", `${messages}/${drafted.body.messageId}/approve`, { token: memberKey, body: { version: drafted.body.version } })).status,
    ).toBe(200);
    expect((await app.call("POST", `${messages}/${drafted.body.messageId}/send`, { token: memberKey })).body.state).toBe("sent");
    const [delivery] = await waitFor("the update_sent event", () => {
      const got = received(sub.name);
      return got.length > 0 && got;
    });
    expect(delivery!.verified).toBe(true);
    expect(delivery!.event).toMatchObject({
      type: "comms.update_sent",
      data: { org: "acme", incidentId, messageId: drafted.body.messageId, state: "sent", workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${incidentId}` },
    });
  });

  it("retries a failing receiver with the same webhook-id until it takes the event", async () => {
    const sub = await subscribe(["incident.opened"]);
    receiver.setBehaviour(sub.name, (n) => (n < 2 ? { status: 503, body: "busy".repeat(400) } : { status: 200 }));
    const incidentId = await openIncident();
    const posts = await waitFor("the third post", () => {
      const got = received(sub.name).filter((d) => d.event.data.incidentId === incidentId);
      return got.some((d) => d.accepted) && got;
    });
    expect(posts).toHaveLength(3);
    expect(new Set(posts.map((p) => p.webhookId)).size).toBe(1);
    const log = await waitFor("the log to say delivered", async () => {
      const res = await app.call("GET", `${BASE}/${sub.id}/deliveries`, { token: owner });
      return res.body.deliveries[0]?.state === "delivered" && res.body.deliveries[0];
    });
    expect(log.attempts.map((a: { status: number }) => a.status)).toEqual([200, 503, 503]);
    // The first 1 KiB of the answer, no more.
    expect(log.attempts[1].response).toBe("busy".repeat(400).slice(0, 1024));
  });

  it("gives up after the schedule and says failed", async () => {
    const sub = await subscribe(["incident.opened"]);
    receiver.setBehaviour(sub.name, () => ({ status: 500 }));
    await openIncident();
    const log = await waitFor(
      "the delivery to fail",
      async () => {
        const res = await app.call("GET", `${BASE}/${sub.id}/deliveries`, { token: owner });
        return res.body.deliveries[0]?.state === "failed" && res.body.deliveries[0];
      },
      30_000,
    );
    // One try and one retry per entry of the schedule (six).
    expect(log.attemptCount).toBe(7);
    const got = await app.call("GET", `${BASE}/${sub.id}`, { token: owner });
    expect(got.body.failingSince).toBeDefined();
  });

  it("starts a fresh retry schedule for a redelivery, one event's or every event's since a time", async () => {
    const sub = await subscribe(["incident.opened"]);
    receiver.setBehaviour(sub.name, () => ({ status: 500 }));
    const before = new Date();
    await openIncident();
    const failedWith = (attempts: number) =>
      waitFor(
        `the delivery to fail after ${attempts} attempts`,
        async () => {
          const res = await app.call("GET", `${BASE}/${sub.id}/deliveries`, { token: owner });
          const delivery = res.body.deliveries[0];
          return delivery?.state === "failed" && delivery.attemptCount === attempts && delivery;
        },
        60_000,
      );
    const first = await failedWith(7);
    // A spent schedule is not one more try: each redelivery gets the whole schedule again.
    const one = await app.call("POST", `${BASE}/${sub.id}/deliveries/${first.webhookId}/redeliver`, { token: owner });
    expect(one.body).toEqual({ queued: 1 });
    await failedWith(14);
    const since = await app.call("POST", `${BASE}/${sub.id}/redeliver`, { token: owner, body: { since: before.toISOString() } });
    expect(since.body).toEqual({ queued: 1 });
    await failedWith(21);
    expect(received(sub.name)).toHaveLength(21);
    expect(new Set(received(sub.name).map((d) => d.webhookId))).toEqual(new Set([first.webhookId]));
  });

  it("disables a subscription at once when the receiver answers 410, with an audit event", async () => {
    const sub = await subscribe(["incident.opened"]);
    receiver.setBehaviour(sub.name, () => ({ status: 410 }));
    await openIncident();
    const got = await waitFor("the subscription to be disabled", async () => {
      const res = await app.call("GET", `${BASE}/${sub.id}`, { token: owner });
      return res.body.state === "disabled" && res.body;
    });
    expect(got.disabledReason).toBe("receiver answered HTTP 410 Gone");
    expect(received(sub.name)).toHaveLength(1);
    const audit = await waitFor("the audit event", async () => {
      const res = await app.call("GET", "/o/acme/audit-events", { token: owner });
      return res.body.events.find((e: { kind: string; data: { id: string } }) => e.kind === "subscriptions.subscription.disabled" && e.data.id === sub.id);
    });
    expect(audit.actor).toBe("warroom");
  });

  it("disables a subscription that has failed for SUBSCRIPTION_DISABLE_AFTER_SECONDS, with an audit event", async () => {
    const sub = await subscribe(["incident.opened"]);
    receiver.setBehaviour(sub.name, () => ({ status: 502 }));
    await openIncident();
    await waitFor("a first failure", async () => (await app.call("GET", `${BASE}/${sub.id}`, { token: owner })).body.failingSince);
    // As if the first failure had been an hour (the configured limit) ago, on the database's clock.
    await sql`update subscriptions.subscriptions set failing_since = now() - interval '3601 seconds' where id = ${sub.id}`;
    await openIncident();
    const got = await waitFor("the subscription to be disabled", async () => {
      const res = await app.call("GET", `${BASE}/${sub.id}`, { token: owner });
      return res.body.state === "disabled" && res.body;
    });
    expect(got.disabledReason).toBe("every delivery failed for 1 h");
    const audit = await waitFor("the audit event", async () => {
      const res = await app.call("GET", "/o/acme/audit-events", { token: owner });
      return res.body.events.find((e: { kind: string; data: { id: string } }) => e.kind === "subscriptions.subscription.disabled" && e.data.id === sub.id);
    });
    expect(audit.data.reason).toBe("every delivery failed for 1 h");
    // Deliveries wait while it is disabled; enabling it again sends them.
    receiver.setBehaviour(sub.name, () => ({ status: 200 }));
    expect((await app.call("PATCH", `${BASE}/${sub.id}`, { token: owner, body: { enabled: true } })).status).toBe(200);
    // The second event's delivery was pending when the subscription was disabled.
    await waitFor("the waiting delivery", () => receiver.acceptedIds(sub.name).size >= 1);
  });

  it("records deliveries as simulated while real egress is off, and sends nothing", async () => {
    const sub = await subscribe(["incident.opened"]);
    await setEgress(false);
    try {
      await openIncident();
      const log = await waitFor("a simulated delivery", async () => {
        const res = await app.call("GET", `${BASE}/${sub.id}/deliveries`, { token: owner });
        return res.body.deliveries[0]?.state === "simulated" && res.body.deliveries[0];
      });
      expect(log.attempts[0]).toMatchObject({ outcome: "simulated", status: 0 });
      expect(received(sub.name)).toHaveLength(0);
      // The test event is the exception: it posts while egress is off.
      const test = await app.call("POST", `${BASE}/${sub.id}/test`, { token: owner });
      expect(test.status).toBe(200);
      expect(test.body).toMatchObject({ ok: true, status: 204 });
      expect(received(sub.name)).toHaveLength(1);
      expect(received(sub.name)[0]).toMatchObject({ verified: true, webhookId: test.body.webhookId });
      expect(received(sub.name)[0]!.event.type).toBe("subscription.test");
    } finally {
      await setEgress(true);
    }
  });

  it("says wherever a subscription is shown or tested that real events are simulated while egress is off", async () => {
    const sub = await subscribe(["incident.opened"]);
    const notice =
      /Real egress is off for this organization: events are recorded as simulated and not sent to this URL; turn it on with PUT \/o\/acme\/oncall\/egress/;
    await setEgress(false);
    try {
      const listed = (await app.call("GET", BASE, { token: owner })).body.subscriptions.find((s: { id: string }) => s.id === sub.id);
      expect(listed).toMatchObject({ egressEnabled: false, notice: expect.stringMatching(notice) });
      expect((await app.call("GET", `${BASE}/${sub.id}`, { token: owner })).body).toMatchObject({
        egressEnabled: false,
        notice: expect.stringMatching(notice),
      });
      const updated = await app.call("PATCH", `${BASE}/${sub.id}`, { token: owner, body: { description: "still simulated" } });
      expect(updated.body).toMatchObject({ egressEnabled: false, notice: expect.stringMatching(notice) });
      const test = await app.call("POST", `${BASE}/${sub.id}/test`, { token: owner });
      expect(test.body).toMatchObject({
        ok: true,
        egressEnabled: false,
        notice: expect.stringMatching(/^This test event was sent, but real events are not: the organization's real egress is off/),
      });
    } finally {
      await setEgress(true);
    }
    const on = (await app.call("GET", `${BASE}/${sub.id}`, { token: owner })).body;
    expect(on.egressEnabled).toBe(true);
    expect(on.notice ?? null).toBeNull();
    expect((await app.call("POST", `${BASE}/${sub.id}/test`, { token: owner })).body.notice ?? null).toBeNull();
  });

  it("signs with the old and the new secret for 24 h after a rotation", async () => {
    const sub = await subscribe(["incident.opened"]);
    const rotated = await app.call("POST", `${BASE}/${sub.id}/rotate-secret`, { token: owner });
    expect(rotated.status).toBe(200);
    expect(rotated.body.secret).toMatch(/^whsec_/);
    expect(rotated.body.secret).not.toBe(sub.secret);
    const expires = Date.parse(rotated.body.previousSecretExpiresAt);
    expect(expires - Date.now()).toBeGreaterThan(23.9 * 3600 * 1000);
    expect(expires - Date.now()).toBeLessThanOrEqual(24 * 3600 * 1000);
    // Each secret alone must verify the same post.
    receiver.setSecrets(sub.name, [sub.secret, rotated.body.secret]);
    const test = await app.call("POST", `${BASE}/${sub.id}/test`, { token: owner });
    expect(test.body.ok).toBe(true);
    const [post] = received(sub.name);
    expect(post!.verified).toBe(true);
    expect(post!.signature.split(" ")).toHaveLength(2);
  });

  it("redelivers one event, or every event since a time, with the same webhook-id", async () => {
    const sub = await subscribe(["incident.opened"]);
    const before = new Date();
    await openIncident();
    await openIncident();
    await waitFor("two deliveries", () => received(sub.name).length === 2);
    const [first] = received(sub.name);
    const one = await app.call("POST", `${BASE}/${sub.id}/deliveries/${first!.webhookId}/redeliver`, { token: owner });
    expect(one.status).toBe(200);
    expect(one.body).toEqual({ queued: 1 });
    await waitFor("the redelivery", () => received(sub.name).length === 3);
    expect(received(sub.name)[2]!.webhookId).toBe(first!.webhookId);
    const since = await app.call("POST", `${BASE}/${sub.id}/redeliver`, { token: owner, body: { since: before.toISOString() } });
    expect(since.body).toEqual({ queued: 2 });
    await waitFor("both again", () => received(sub.name).length === 5);
    expect(receiver.acceptedIds(sub.name).size).toBe(2);
    const missing = await app.call("POST", `${BASE}/${sub.id}/deliveries/msg_nope/redeliver`, { token: owner });
    expect(missing.status).toBe(404);
    // A test event is never sent again (it would bypass the egress switch): the answer says what to do.
    const test = await app.call("POST", `${BASE}/${sub.id}/test`, { token: owner });
    const again = await app.call("POST", `${BASE}/${sub.id}/deliveries/${test.body.webhookId}/redeliver`, { token: owner });
    expect(again).toMatchObject({ status: 409, body: { error: "a test event is not sent again; send a new one with POST .../test" } });
  });

  it("keeps one slow receiver from delaying another", async () => {
    const slow = await subscribe(["incident.opened"]);
    const fast = await subscribe(["incident.opened"]);
    receiver.setBehaviour(slow.name, () => "hang");
    // The slow receiver holds a post open first; the ten come while it hangs.
    await openIncident("slow-fast first");
    await waitFor("the slow receiver to hold a post", () => receiver.hanging(slow.name).open > 0, 30_000);
    const ten: string[] = [];
    for (let i = 0; i < 10; i++) ten.push(await openIncident(`slow-fast ${i}`));
    await waitFor(
      "the fast receiver to get all ten",
      () => {
        const got = new Set(received(fast.name).map((d) => d.event.data.incidentId));
        return ten.every((id) => got.has(id));
      },
      30_000,
    );
    // The slow one never holds more than SUBSCRIPTION_CONCURRENCY (4) posts at once, each cut at
    // the timeout; the fast one's deliveries never queue behind them.
    const hanging = receiver.hanging(slow.name);
    expect(hanging.total).toBeGreaterThan(0);
    expect(hanging.maxOpen).toBeLessThanOrEqual(4);
    receiver.setBehaviour(slow.name, () => ({ status: 204 }));
    await app.call("DELETE", `${BASE}/${slow.id}`, { token: owner });
  });
});

describe("subscriptions: an investigation's completion", () => {
  it("delivers incident.investigation_completed, signed, once the reads of a new incident are recorded", async () => {
    const prometheus = await startFakePrometheus();
    const logDir = mkdtempSync(join(tmpdir(), "wr-logs-"));
    const sourceToken = `tok-${randomBytes(12).toString("hex")}`;
    const source = await createPrometheusFilesSource({ prometheusUrl: prometheus.url, logDir, auth: { bearerTokens: [sourceToken] } }).listen({
      host: "127.0.0.1",
    });
    let connectionId: string | undefined;
    try {
      const sub = await subscribe(["incident.investigation_completed"]);
      const connected = await app.call("POST", "/o/acme/remote-sources", {
        token: owner,
        body: { name: "example", baseUrl: source.url, transport: "http", tenantRef: "tenant-subs", auth: { bearerToken: sourceToken } },
      });
      expect(connected.status, JSON.stringify(connected.body)).toBe(201);
      connectionId = connected.body.id;
      const reads = [{ name: "error rate", call: "metrics/range", template: `'rate(http_requests_total{source="' + incident.source + '"}[5m])'` }];
      const saved = await app.call("PUT", `/o/acme/remote-sources/${connectionId}/investigation-reads`, { token: owner, body: { reads } });
      expect(saved.status, JSON.stringify(saved.body)).toBe(200);

      const incidentId = await openIncident("Investigated on opening");
      // The whole chain (opened event, investigation, read, timeline entry, fan-out, post) takes
      // about a second on a busy machine: the bound is well over 10x that.
      const [delivery] = await waitFor(
        "the investigation_completed event",
        () => {
          const got = received(sub.name).filter((d) => d.event.data.incidentId === incidentId);
          return got.length > 0 && got;
        },
        30_000,
      );
      // As an independent receiver verifies it: the library checks the signature and returns the payload.
      const payload = new Webhook(sub.secret).verify(delivery!.body, {
        "webhook-id": delivery!.webhookId,
        "webhook-timestamp": delivery!.timestamp,
        "webhook-signature": delivery!.signature,
      }) as { type: string; timestamp: string; data: Record<string, unknown> };
      expect(payload.type).toBe("incident.investigation_completed");
      // The payload services/subscriptions/README.md describes: org, incidentId, workspaceUrl, kind, at.
      expect(payload.data).toEqual({
        org: "acme",
        incidentId,
        workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${incidentId}`,
        kind: "investigation",
        at: expect.any(String),
      });
      expect(Date.parse(payload.data.at as string)).not.toBeNaN();
      expect(payload.timestamp).toBe(new Date(Date.parse(payload.data.at as string)).toISOString());

      // By the time it is sent, the evidence it points at is there, and the run is done.
      const evidence = await app.call("GET", `/o/acme/incidents/${incidentId}/evidence`, { token: memberKey });
      expect(evidence.status).toBe(200);
      expect(evidence.body.investigations).toEqual([expect.objectContaining({ run: 1, state: "done" })]);
      expect(evidence.body.evidence).toEqual([expect.objectContaining({ readName: "error rate", connectionName: "example", partial: false })]);
      expect(evidence.body.evidence[0].series.length).toBeGreaterThan(0);
      // The read reached the source's Prometheus with the incident's own values.
      expect(prometheus.requests.some((r) => r.params.get("query") === 'rate(http_requests_total{source="metrics-monitor"}[5m])')).toBe(true);
      // Only the type subscribed: the incident's opening is not sent to this subscription.
      expect(received(sub.name).map((d) => d.event.type)).toEqual(["incident.investigation_completed"]);
    } finally {
      // The organization's later incidents are not investigated.
      if (connectionId) await app.call("DELETE", `/o/acme/remote-sources/${connectionId}`, { token: owner });
      await source.close();
      await prometheus.close();
      rmSync(logDir, { recursive: true, force: true });
    }
  });
});
