import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp } from "../support/app.js";
import { FIVE_SOURCES, sendAs } from "./correlation-kit.js";
import { bootstrapOrg, type Credentials, type IntakeApp, unique } from "./triggers-kit.js";

/**
 * Correlation across sources over the public routes, in one process: five tools reporting one
 * service become one group of linked incidents (link mode) or one incident (attach mode); other
 * services and other organizations stay apart; settings are owner/admin only, checked and audited,
 * and travel in configuration as code.
 */

let app: IntakeApp;
let sql: postgres.Sql;

beforeAll(async () => {
  const started = await startApp();
  app = { ...started, mode: "one process", gatewayUrls: [started.url] };
  sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
}, 120_000);

afterAll(async () => {
  await sql?.end();
  await app?.stop();
});

async function newOrg(): Promise<{ slug: string; creds: Credentials }> {
  const slug = unique("c").slice(0, 30);
  return { slug, creds: await bootstrapOrg(app, slug) };
}

async function putCorrelation(slug: string, token: string, body: unknown) {
  return app.call("PUT", `/o/${slug}/correlation`, { token, body });
}

async function incidentsOf(slug: string, token: string, query = ""): Promise<any[]> {
  const res = await app.call("GET", `/o/${slug}/incidents?limit=1000${query}`, { token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.incidents;
}

describe("correlation across sources", () => {
  it("links the incidents of five sources reporting one service as one group, with its size and related incidents", async () => {
    const { slug, creds } = await newOrg();
    const set = await putCorrelation(slug, creds.owner, { mode: "link", windowMinutes: 30 });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body).toEqual({ mode: "link", windowMinutes: 30, key: "" });

    const run = unique("r");
    for (const source of FIVE_SOURCES) {
      const res = await sendAs(app.url, creds, source, "checkout-api", run, 1);
      expect(res.status, `${source}: ${JSON.stringify(res.body)}`).toBeLessThan(300);
      expect(res.status).toBeGreaterThanOrEqual(200);
    }
    // Another service in the same window is never merged into the group.
    const other = await sendAs(app.url, creds, "metrics-monitor", "payments", unique("r"), 1);
    expect(other.status).toBe(201);

    const incidents = await incidentsOf(slug, creds.owner);
    expect(incidents).toHaveLength(6);
    const checkout = incidents.filter((i) => i.entity?.id === "checkout-api");
    expect(new Set(checkout.map((i) => i.source))).toEqual(new Set(FIVE_SOURCES));
    const groups = new Set(checkout.map((i) => i.correlationGroupId));
    expect(groups.size).toBe(1);
    const [groupId] = groups;
    expect(groupId).toMatch(/^[0-9a-f-]{36}$/);
    for (const incident of checkout) expect(incident.correlationGroupSize).toBe(5);
    const payments = incidents.find((i) => i.entity?.id === "payments");
    expect(payments.correlationGroupId).not.toBe(groupId);
    expect(payments.correlationGroupSize).toBe(1);

    const first = checkout.at(-1);
    const page = await app.call("GET", `/o/${slug}/incidents/${first.id}`, { token: creds.owner });
    expect(page.status).toBe(200);
    expect(page.body.related.map((r: any) => r.id).sort()).toEqual(
      checkout
        .filter((i) => i.id !== first.id)
        .map((i) => i.id)
        .sort(),
    );
    expect(page.body.related[0]).toMatchObject({ title: expect.any(String), state: "open", source: expect.any(String), openedAt: expect.any(String) });

    const filtered = await incidentsOf(slug, creds.owner, `&correlationGroupId=${groupId}`);
    expect(filtered.map((i) => i.id).sort()).toEqual(checkout.map((i) => i.id).sort());
    const bad = await app.call("GET", `/o/${slug}/incidents?correlationGroupId=nope`, { token: creds.owner });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toContain("correlationGroupId");
  });

  it("attaches the later sources' alerts to the first incident, naming each source on its timeline", async () => {
    const { slug, creds } = await newOrg();
    expect((await putCorrelation(slug, creds.owner, { mode: "attach", windowMinutes: 10 })).status).toBe(200);
    const run = unique("r");
    const answers = [];
    for (const source of FIVE_SOURCES) answers.push(await sendAs(app.url, creds, source, "checkout-api", run, 1));
    for (const answer of answers) expect(answer.status, JSON.stringify(answer.body)).toBeLessThan(300);
    // The shared route and the alert router answer in warroom's shape (the drop-in routes in their tools').
    expect(answers[0]!.body.outcome).toBe("opened");
    expect(answers[1]!.body).toMatchObject({ outcome: "attached", incidentId: answers[0]!.body.incidentId });
    expect(answers[4]!.body).toMatchObject({ outcome: "attached", incidentId: answers[0]!.body.incidentId });
    const incidents = await incidentsOf(slug, creds.owner);
    expect(incidents).toHaveLength(1);
    const page = await app.call("GET", `/o/${slug}/incidents/${incidents[0].id}`, { token: creds.owner });
    const timeline = page.body.timeline as any[];
    expect(timeline.map((e) => e.kind)).toEqual(["opened", "repeat", "repeat", "repeat", "repeat"]);
    expect(timeline.map((e) => e.data.correlation.source)).toEqual([...FIVE_SOURCES]);
    expect(page.body.repeatCount).toBe(4);

    // A later alert of a source already attached stays on the same incident.
    const again = await sendAs(app.url, creds, "metrics-monitor", "checkout-api", run, 2);
    expect(again.body).toMatchObject({ outcome: "attached", incidentId: incidents[0].id });
  });

  it("keys by an organization's CEL expression over the normalized alert, and a key that fails correlates nothing", async () => {
    const { slug, creds } = await newOrg();
    // Every alert of the service, whatever its entity kind is called, by its id.
    const set = await putCorrelation(slug, creds.owner, { mode: "link", key: 'alert.entity != null ? alert.entity.id : ""' });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body.windowMinutes).toBe(30);
    const run = unique("r");
    await sendAs(app.url, creds, "metrics-monitor", "checkout-api", run, 1);
    await sendAs(app.url, creds, "pagerduty-events", "checkout-api", run, 1);
    const incidents = await incidentsOf(slug, creds.owner);
    expect(incidents).toHaveLength(2);
    expect(incidents[0].correlationGroupId).toBeDefined();
    expect(incidents[0].correlationGroupId).toBe(incidents[1].correlationGroupId);
  });

  it("never crosses organizations, and an organization that set nothing is not correlated", async () => {
    const a = await newOrg();
    const b = await newOrg();
    const c = await newOrg();
    await putCorrelation(a.slug, a.creds.owner, { mode: "link" });
    await putCorrelation(b.slug, b.creds.owner, { mode: "link" });
    const run = unique("r");
    for (const org of [a, b, c]) await sendAs(app.url, org.creds, "metrics-monitor", "checkout-api", run, 1);
    const [ia] = await incidentsOf(a.slug, a.creds.owner);
    const [ib] = await incidentsOf(b.slug, b.creds.owner);
    const [ic] = await incidentsOf(c.slug, c.creds.owner);
    expect(ia.correlationGroupId).toBeDefined();
    expect(ib.correlationGroupId).toBeDefined();
    expect(ia.correlationGroupId).not.toBe(ib.correlationGroupId);
    expect(ic.correlationGroupId ?? null).toBeNull();
    expect(ic.correlationGroupSize).toBe(0);
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from intake.correlation_groups g join intake.correlation_settings s using (org_id)`;
    expect(row!.n).toBeGreaterThanOrEqual(2);
  });

  it("is set by owners and admins only, checked, audited, and turned off by DELETE", async () => {
    const { slug, creds } = await newOrg();
    const added = await app.call("POST", `/o/${slug}/members`, {
      token: creds.owner,
      body: { email: `m@${slug}.test`, password: "member password 1", role: "member" },
    });
    expect(added.status).toBe(201);
    const login = await app.call("POST", "/auth/login", { body: { email: `m@${slug}.test`, password: "member password 1", orgSlug: slug } });
    const member = login.body.accessToken as string;

    expect((await app.call("GET", `/o/${slug}/correlation`, { token: member })).body).toEqual({ mode: "", windowMinutes: 0, key: "" });
    const refused = await putCorrelation(slug, member, { mode: "link" });
    expect(refused.status).toBe(403);

    const badMode = await putCorrelation(slug, creds.owner, { mode: "merge" });
    expect(badMode.status).toBe(400);
    expect(badMode.body.error).toContain("mode: link");
    const badWindow = await putCorrelation(slug, creds.owner, { mode: "link", windowMinutes: 100_000 });
    expect(badWindow.status).toBe(400);
    expect(badWindow.body.error).toContain("windowMinutes");
    const badKey = await putCorrelation(slug, creds.owner, { mode: "link", key: "body.service" });
    expect(badKey.status).toBe(400);
    expect(badKey.body.error).toContain("key");
    expect(badKey.body.error).toContain("alert");

    expect((await putCorrelation(slug, creds.owner, { mode: "attach", windowMinutes: 15 })).status).toBe(200);
    expect((await app.call("GET", `/o/${slug}/correlation`, { token: member })).body).toEqual({ mode: "attach", windowMinutes: 15, key: "" });
    expect((await app.call("DELETE", `/o/${slug}/correlation`, { token: member })).status).toBe(403);
    expect((await app.call("DELETE", `/o/${slug}/correlation`, { token: creds.owner })).status).toBe(204);
    expect((await app.call("DELETE", `/o/${slug}/correlation`, { token: creds.owner })).status).toBe(404);

    // Audit records travel through the outbox: read until both have arrived.
    let kinds: string[] = [];
    for (let attempt = 0; attempt < 100 && !kinds.includes("correlation.deleted"); attempt++) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, 200));
      const audit = await app.call("GET", `/o/${slug}/audit-events`, { token: creds.owner });
      kinds = (audit.body.events as any[]).map((e) => e.kind);
    }
    expect(kinds).toContain("correlation.set");
    expect(kinds).toContain("correlation.deleted");
  });

  it("travels in configuration as code: applied, exported, applied again with no change, and turned off", async () => {
    const { slug, creds } = await newOrg();
    const yaml = "version: 1\ncorrelation:\n  mode: link\n  windowMinutes: 20\n  key: alert.entity.id\n";
    const plan = await app.call("POST", `/o/${slug}/config`, { token: creds.owner, body: { yaml } });
    expect(plan.status, JSON.stringify(plan.body)).toBe(200);
    expect(plan.body.changes).toEqual([{ action: "create", kind: "correlation", name: "correlation" }]);
    const exported = await app.call("GET", `/o/${slug}/config`, { token: creds.owner });
    expect(exported.body.yaml).toContain("correlation:\n  mode: link\n  windowMinutes: 20\n  key: alert.entity.id\n");
    const again = await app.call("POST", `/o/${slug}/config`, { token: creds.owner, body: { yaml: exported.body.yaml } });
    expect(again.body.changes).toEqual([]);
    const bad = await app.call("POST", `/o/${slug}/config`, { token: creds.owner, body: { yaml: "version: 1\ncorrelation:\n  mode: link\n  key: nope(\n" } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toContain("correlation.key");
    const off = await app.call("POST", `/o/${slug}/config`, { token: creds.owner, body: { yaml: "version: 1\ncorrelation:\n  mode: off\n" } });
    expect(off.body.changes).toEqual([{ action: "delete", kind: "correlation", name: "correlation" }]);
    expect((await app.call("GET", `/o/${slug}/correlation`, { token: creds.owner })).body.mode).toBe("");
  });
});
