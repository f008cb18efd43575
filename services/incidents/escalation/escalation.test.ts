import { randomBytes } from "node:crypto";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IncidentsService } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { startSubscriptionsHarness, type SubscriptionsHarness } from "../../subscriptions/testing/harness.js";
import { createEscalationSweeper } from "./escalation-sweep.js";
import { createLogger } from "../../runtime/observability/logger.js";

/**
 * Acknowledgement deadlines over the running service: the policy's API (REST, Connect, gRPC),
 * and incident.unacknowledged delivered to a subscription once per step, stopped by an
 * acknowledgement, a resolve or a maintenance window. The database clock is the test clock: an
 * incident's opened_at is moved back instead of waiting minutes.
 */

const PUBLIC_URL = "https://warroom.example.test";
const POLICY = "/o/acme/escalation";

let harness: SubscriptionsHarness;
let owner: string;
let member: string;
let endpoint: string;

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function openIncident(severity = "sev1", entity?: { kind: string; id: string }): Promise<string> {
  const response = await harness.clients.incidents.record({
    orgId: harness.orgId,
    orgSlug: "acme",
    alert: {
      source: "metrics-monitor",
      attachIdentity: `esc-${randomBytes(6).toString("hex")}`,
      kind: "alert",
      title: "Checkout error rate above 5%",
      severity,
      ...(entity ? { entity } : {}),
    },
  });
  expect(response.outcome).toBe("opened");
  return response.incident!.id;
}

/** Moves the incident's opening back, as if `minutes` had passed since (the deadlines are the database clock's). */
async function age(id: string, minutes: number): Promise<void> {
  await harness.sql`update incidents.incidents set opened_at = now() - make_interval(mins => ${minutes}) - interval '1 second' where id = ${id}`;
}

const unacknowledged = (id: string) =>
  harness.receiver.deliveries.filter((d) => d.endpoint === endpoint && d.event.type === "incident.unacknowledged" && d.event.data.incidentId === id);

/** Lets several sweeps run (one every 0.2 s), so what was due has been decided, before checking that nothing more came. */
const aSweepLater = () => new Promise((r) => setTimeout(r, 1500));

beforeAll(async () => {
  harness = await startSubscriptionsHarness({ env: { PUBLIC_URL, ESCALATION_SWEEP_SECONDS: "0.2", SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: "0.1,0.2,0.4" } });
  owner = harness.owner;
  const added = await harness.app.call("POST", "/o/acme/members", {
    token: owner,
    body: { email: "esc-member@acme.test", password: "esc member password", role: "member" },
  });
  expect(added.status).toBe(201);
  const login = await harness.app.call("POST", "/auth/login", { body: { email: "esc-member@acme.test", password: "esc member password", orgSlug: "acme" } });
  member = login.body.accessToken;
  endpoint = "escalation";
  harness.receiver.endpoint(endpoint, []);
  const res = await harness.app.call("POST", "/o/acme/subscriptions", {
    token: owner,
    body: { url: harness.receiver.url(endpoint), events: ["incident.unacknowledged"], description: "second ntfy topic" },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  harness.receiver.setSecrets(endpoint, [res.body.secret]);
}, 120_000);

afterAll(async () => {
  await harness?.stop();
});

describe("the escalation policy API", () => {
  it("starts empty, is replaced whole by PUT, read back sev1 first, and audited", async () => {
    const empty = await harness.app.call("GET", POLICY, { token: owner });
    expect(empty.status).toBe(200);
    expect(empty.body).toEqual({ severities: [], updatedAt: null, updatedBy: null });

    const put = await harness.app.call("PUT", POLICY, {
      token: owner,
      body: {
        severities: [
          { severity: "sev2", minutes: [10, 30] },
          { severity: "sev1", minutes: [5, 15, 30] },
          { severity: "sev4", minutes: [] },
        ],
      },
    });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body.severities).toEqual([
      { severity: "sev1", minutes: [5, 15, 30] },
      { severity: "sev2", minutes: [10, 30] },
    ]);
    expect(put.body.updatedBy).toBe("owner@acme.test");
    const read = await harness.app.call("GET", POLICY, { token: member });
    expect(read.status).toBe(200);
    expect(read.body.severities).toEqual(put.body.severities);

    const audit = await waitFor("the audit record", async () => {
      const res = await harness.app.call("GET", "/o/acme/audit-events", { token: owner });
      return res.body.events.find((e: { kind: string }) => e.kind === "escalation_policy.changed");
    });
    expect(audit.actor).toBe("owner@acme.test");
    expect(audit.data.severities).toEqual(put.body.severities);

    // The same policy again changes nothing and is not audited twice.
    await harness.app.call("PUT", POLICY, { token: owner, body: { severities: put.body.severities } });
    await new Promise((r) => setTimeout(r, 300));
    const events = (await harness.app.call("GET", "/o/acme/audit-events", { token: owner })).body.events;
    expect(events.filter((e: { kind: string }) => e.kind === "escalation_policy.changed")).toHaveLength(1);
  });

  it("refuses what is not ascending, out of range, too long, doubled or unknown, saying what to change", async () => {
    const cases: [unknown, RegExp][] = [
      [[{ severity: "sev1", minutes: [15, 5] }], /sev1 step 2: 5 minutes is not after step 1 \(15\); list the minutes in ascending order/],
      [[{ severity: "sev1", minutes: [5, 5] }], /not after step 1/],
      [[{ severity: "sev1", minutes: [0] }], /minutes/],
      [[{ severity: "sev1", minutes: [10081] }], /minutes/],
      [[{ severity: "sev1", minutes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] }], /minutes/],
      [
        [
          { severity: "sev1", minutes: [5] },
          { severity: "sev1", minutes: [10] },
        ],
        /sev1 is given twice/,
      ],
      [[{ severity: "sev9", minutes: [5] }], /severity/],
    ];
    for (const [severities, message] of cases) {
      const res = await harness.app.call("PUT", POLICY, { token: owner, body: { severities } });
      expect(res.status, JSON.stringify(severities)).toBe(400);
      expect(JSON.stringify(res.body), JSON.stringify(severities)).toMatch(message);
    }
    // Nothing of the refused policies was kept.
    expect((await harness.app.call("GET", POLICY, { token: owner })).body.severities[0]).toEqual({ severity: "sev1", minutes: [5, 15, 30] });
  });

  it("lets a member read but not change it, and no one without a credential", async () => {
    const res = await harness.app.call("PUT", POLICY, { token: member, body: { severities: [] } });
    expect(res.status).toBe(403);
    expect((await harness.app.call("GET", POLICY, {})).status).toBe(401);
  });

  it("answers the same over Connect and gRPC, with the same checks", async () => {
    const headers = { authorization: `Bearer ${owner}` };
    for (const transport of [createConnectTransport({ baseUrl: harness.app.url, httpVersion: "1.1" }), createGrpcTransport({ baseUrl: harness.app.url })]) {
      const client = createClient(IncidentsService, transport);
      const policy = await client.getEscalationPolicy({ org: "acme" }, { headers });
      expect(policy.severities.map((s) => [s.severity, s.minutes])).toEqual([
        ["sev1", [5, 15, 30]],
        ["sev2", [10, 30]],
      ]);
      const refused = await client.putEscalationPolicy({ org: "acme", severities: [{ severity: "sev3", minutes: [20, 10] }] }, { headers }).catch((e) => e);
      expect(refused).toBeInstanceOf(ConnectError);
      expect((refused as ConnectError).code).toBe(Code.InvalidArgument);
      expect((refused as ConnectError).rawMessage).toMatch(/ascending/);
    }
  });
});

describe("the escalation policy in configuration as code", () => {
  it("is exported, planned, applied once, and refused with the step named when wrong", async () => {
    const { parse, stringify } = await import("yaml");
    const exported = await harness.app.call("GET", "/o/acme/config", { token: owner });
    expect(exported.status).toBe(200);
    expect(parse(exported.body.yaml).escalation).toEqual({ sev1: [5, 15, 30], sev2: [10, 30] });
    const apply = (yaml: string, dryRun = false) => harness.app.call("POST", "/o/acme/config", { token: owner, body: { yaml, dryRun } });
    // The exported file changes nothing.
    expect((await apply(exported.body.yaml)).body).toMatchObject({ changes: [], applied: false });

    const wanted = stringify({ version: 1, escalation: { sev1: [5, 15, 30], sev2: [10, 30], sev3: [60] } });
    const plan = await apply(wanted, true);
    expect(plan.status, JSON.stringify(plan.body)).toBe(200);
    expect(plan.body.changes).toEqual([{ action: "update", kind: "escalation", name: "policy" }]);
    expect((await harness.app.call("GET", POLICY, { token: owner })).body.severities).toHaveLength(2);
    const applied = await apply(wanted);
    expect(applied.body).toMatchObject({ applied: true });
    expect((await harness.app.call("GET", POLICY, { token: owner })).body.severities).toEqual([
      { severity: "sev1", minutes: [5, 15, 30] },
      { severity: "sev2", minutes: [10, 30] },
      { severity: "sev3", minutes: [60] },
    ]);
    expect((await apply(wanted)).body).toMatchObject({ changes: [], applied: false });

    const wrong = await apply(stringify({ version: 1, escalation: { sev1: [30, 5] } }));
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toBe("escalation: sev1 step 2: 5 minutes is not after step 1 (30); list the minutes in ascending order");
    // Back to the policy the tests below expect.
    expect((await apply(stringify({ version: 1, escalation: { sev1: [5, 15, 30], sev2: [10, 30] } }))).body).toMatchObject({ applied: true });
  });
});

describe("incident.unacknowledged", () => {
  it("is delivered once per passed step, with the step, deadline and link, and the incident shows the next deadline", async () => {
    const id = await openIncident("sev1");
    const fresh = await harness.app.call("GET", `/o/acme/incidents/${id}`, { token: member });
    expect(fresh.body.nextEscalation).toMatchObject({ step: 1, steps: 3, minutes: 5 });
    expect(Date.parse(fresh.body.nextEscalation.dueAt) - Date.parse(fresh.body.openedAt)).toBe(5 * 60_000);

    await age(id, 5);
    const [first] = await waitFor("step 1", () => unacknowledged(id).length > 0 && unacknowledged(id));
    expect(first!.verified).toBe(true);
    expect(first!.event.data).toMatchObject({
      org: "acme",
      incidentId: id,
      workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${id}`,
      kind: "unacknowledged",
      title: "Checkout error rate above 5%",
      severity: "sev1",
      source: "metrics-monitor",
      step: 1,
      steps: 3,
      minutes: 5,
    });
    const incident = (await harness.app.call("GET", `/o/acme/incidents/${id}`, { token: member })).body;
    expect(Date.parse(first!.event.data.deadline as string)).toBe(Date.parse(incident.openedAt) + 5 * 60_000);
    expect(incident.nextEscalation).toMatchObject({ step: 2, steps: 3, minutes: 15 });
    const entry = incident.timeline.find((e: { kind: string }) => e.kind === "unacknowledged");
    expect(entry).toMatchObject({ summary: "Not acknowledged 5 minutes after opening (step 1 of 3)", data: { step: 1, steps: 3, minutes: 5 } });

    await aSweepLater();
    expect(unacknowledged(id)).toHaveLength(1);

    await age(id, 15);
    await waitFor("step 2", () => unacknowledged(id).length === 2);
    expect(unacknowledged(id).map((d) => d.event.data.step)).toEqual([1, 2]);
    await aSweepLater();
    expect(unacknowledged(id)).toHaveLength(2);
  });

  it("stops at an acknowledgement: no later step, and no next deadline shown", async () => {
    const id = await openIncident("sev1");
    await age(id, 5);
    await waitFor("step 1", () => unacknowledged(id).length === 1);
    const ack = await harness.app.call("POST", `/o/acme/incidents/${id}/acknowledge`, { token: member });
    expect(ack.status).toBe(200);
    expect(ack.body.nextEscalation).toBeNull();
    await age(id, 30);
    await aSweepLater();
    expect(unacknowledged(id)).toHaveLength(1);
  });

  it("stops at a resolve", async () => {
    const id = await openIncident("sev1");
    expect((await harness.app.call("POST", `/o/acme/incidents/${id}/resolve`, { token: member })).status).toBe(200);
    await age(id, 30);
    await aSweepLater();
    expect(unacknowledged(id)).toHaveLength(0);
    const [held] = await harness.sql<{ n: number }[]>`select count(*)::int as n from incidents.escalation_steps where incident_id = ${id}`;
    expect(held!.n).toBe(0);
  });

  it("is held while a maintenance window covers the incident, and the steps after the window's end are sent", async () => {
    const entity = { kind: "service", id: `esc-${randomBytes(4).toString("hex")}` };
    const id = await openIncident("sev1", entity);
    const window = await harness.app.call("POST", "/o/acme/maintenance-windows", {
      token: owner,
      body: {
        startsAt: new Date(Date.now() - 60_000).toISOString(),
        endsAt: new Date(Date.now() + 3600_000).toISOString(),
        reason: "database upgrade",
        match: { entities: [entity] },
      },
    });
    expect(window.status).toBe(201);
    await age(id, 5);
    await waitFor("step 1 held", async () => {
      const [row] = await harness.sql<{ outcome: string }[]>`select outcome from incidents.escalation_steps where incident_id = ${id} and step = 1`;
      return row?.outcome === "suppressed";
    });
    expect(unacknowledged(id)).toHaveLength(0);
    // Another entity's incident is not covered by the window.
    const other = await openIncident("sev1", { kind: "service", id: "not-in-maintenance" });
    await age(other, 5);
    await waitFor("the other incident's step 1", () => unacknowledged(other).length === 1);

    expect((await harness.app.call("POST", `/o/acme/maintenance-windows/${window.body.id}/end`, { token: owner })).status).toBe(200);
    // The held step stays held; the next one, due after the window's end, is sent.
    await aSweepLater();
    expect(unacknowledged(id)).toHaveLength(0);
    await age(id, 15);
    await waitFor("step 2", () => unacknowledged(id).length === 1);
    expect(unacknowledged(id)[0]!.event.data.step).toBe(2);
  });

  it("sends only the latest passed step when several passed before a sweep (a late sweep, a policy set on old incidents)", async () => {
    const id = await openIncident("sev1");
    await age(id, 31);
    await waitFor("step 3", () => unacknowledged(id).length === 1);
    expect(unacknowledged(id)[0]!.event.data.step).toBe(3);
    const rows = await harness.sql<{ step: number; outcome: string }[]>`
      select step, outcome from incidents.escalation_steps where incident_id = ${id} order by step`;
    expect(rows).toEqual([
      { step: 1, outcome: "skipped" },
      { step: 2, outcome: "skipped" },
      { step: 3, outcome: "emitted" },
    ]);
    expect((await harness.app.call("GET", `/o/acme/incidents/${id}`, { token: member })).body.nextEscalation).toBeNull();
  });

  it("writes one event per step when many sweepers on their own connections sweep at once", async () => {
    const ids = await Promise.all(Array.from({ length: 20 }, () => openIncident("sev2")));
    const pools = Array.from({ length: 4 }, () => postgres(harness.app.databaseUrl, { max: 2, onnotice: () => {} }));
    const logger = createLogger("silent", "escalation-test");
    const sweepers = pools.map((sql) => createEscalationSweeper({ sql, outbox: { poke() {} }, logger }));
    try {
      // Aged in one statement, then swept by four sweepers (and the service's own) at once.
      await harness.sql`update incidents.incidents set opened_at = now() - interval '11 minutes' where id = any(${ids}::uuid[])`;
      const results = await Promise.all(sweepers.flatMap((s) => [s.sweep(), s.sweep()]));
      expect(results.reduce((n, r) => n + r.emitted, 0)).toBeLessThanOrEqual(ids.length);
      await waitFor("a delivery per incident", () => ids.every((id) => unacknowledged(id).length === 1));
      const [events] = await harness.sql<{ n: number }[]>`
        select count(*)::int as n from incidents.escalation_steps where incident_id = any(${ids}::uuid[]) and outcome = 'emitted'`;
      expect(events!.n).toBe(ids.length);
      await aSweepLater();
      for (const id of ids) expect(unacknowledged(id)).toHaveLength(1);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });
});
