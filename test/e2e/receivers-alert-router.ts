import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { callApi } from "../support/app.js";
import {
  duringMaintenance,
  fixture,
  getIncident,
  listIncidents,
  PUBLIC_URL,
  resolveIncident,
  unique,
  UUID,
  type Answer,
  type SuiteContext,
} from "./triggers-kit.js";

/** `POST /triggers/alertrouter` (Alertmanager webhook version 4), with the fixtures. */

const GROUP_KEY = '{}/{severity="critical"}:{alertname="HighErrorRate", namespace="checkout"}';

export function alertRouterSuite(ctx: SuiteContext): void {
  let db: postgres.Sql;

  beforeAll(() => {
    db = postgres(ctx.app.databaseUrl, { max: 1, onnotice: () => {} });
  });

  afterAll(async () => {
    await db?.end();
  });

  /** `secret` null sends no secret header at all. */
  const post = (body: unknown, secret: string | null = ctx.creds.alertRouterSecret): Promise<Answer> =>
    callApi(ctx.app.url, "POST", "/triggers/alertrouter", {
      headers: {
        "content-type": "application/json",
        "user-agent": "Alertmanager/0.28.1",
        ...(secret === null ? {} : { "x-service-alertrouter-secret": secret }),
      },
      raw: JSON.stringify(body),
    });
  const incident = (id: string) => getIncident(ctx.app, ctx.creds.owner, id);

  /** The firing fixture as another group of alerts. */
  function group(labels: Record<string, string>, annotations: Record<string, string> = {}) {
    const body = fixture("alertmanager/webhook-v4-firing.json");
    const groupKey = `{}:{alertname="${labels.alertname ?? "none"}", group="${unique("g")}"}`;
    body.groupKey = groupKey;
    body.commonLabels = labels;
    body.groupLabels = { alertname: labels.alertname ?? "" };
    body.commonAnnotations = annotations;
    body.alerts = [{ ...body.alerts[0], labels, annotations, fingerprint: unique("fp") }];
    return body;
  }

  let incidentId: string;

  it("a firing notification opens: 202 opened, title from alertname, severity from the severity label, entity from the service label", async () => {
    const res = await post(fixture("alertmanager/webhook-v4-firing.json"));
    expect(res.status).toBe(202);
    expect(res.body).toEqual({
      outcome: "opened",
      incidentId: expect.stringMatching(UUID),
      entity: { kind: "service", id: "checkout-api" },
      proposedSeverity: "sev1",
      workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${res.body.incidentId}`,
      reason: null,
    });
    incidentId = res.body.incidentId;
    const got = await incident(incidentId);
    expect(got).toMatchObject({
      title: "HighErrorRate",
      severity: "sev1",
      state: "open",
      // The badge names the alert-router.
      source: "alert-router",
      entity: { kind: "service", id: "checkout-api" },
      // Kept on the incident for the investigation to read.
      runbookUrl: "https://runbooks.example.com/HighErrorRate",
    });
    expect(got.timeline).toHaveLength(1);
    expect(got.timeline[0]).toMatchObject({ kind: "opened", summary: "checkout-api 5xx ratio above 5%", alertRef: GROUP_KEY });
  });

  it("the same notification again attaches and records a repeat, as does the group grown; each repeat carries the time it arrived", async () => {
    const before = Date.now();
    const again = await post(fixture("alertmanager/webhook-v4-firing.json"));
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ outcome: "attached", incidentId });
    const grown = fixture("alertmanager/webhook-v4-firing.json");
    grown.alerts.push({ ...grown.alerts[0], fingerprint: "0a1b2c3d4e5f6789", labels: { ...grown.alerts[0].labels, service: "checkout-web" } });
    const later = await post(grown);
    expect(later.status).toBe(200);
    expect(later.body).toMatchObject({ outcome: "attached", incidentId });
    const { timeline } = await incident(incidentId);
    expect(timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat", "repeat"]);
    // The opened entry is the problem's start; a repeat is when it arrived, the sender's own time in its data.
    expect(timeline[0].at).toBe("2024-06-12T10:02:17.513Z");
    for (const repeat of timeline.slice(1)) {
      expect(Date.parse(repeat.at)).toBeGreaterThanOrEqual(before - 5_000);
      expect(Date.parse(repeat.at)).toBeLessThanOrEqual(Date.now() + 5_000);
      expect(Date.parse(repeat.data.occurredAt)).toBe(Date.parse("2024-06-12T10:02:17.513Z"));
    }
  });

  it("20 concurrent copies of one notification: exactly one 202 opened, 19 attached, 19 repeats recorded", async () => {
    const body = group({ alertname: "StormCopy", severity: "critical", service: "checkout-api" });
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(body)));
    expect(answers.map((a) => a.status).toSorted()).toEqual([...Array(19).fill(200), 202]);
    expect(answers.map((a) => a.body.outcome).toSorted()).toEqual([...Array(19).fill("attached"), "opened"]);
    const ids = new Set(answers.map((a) => a.body.incidentId));
    expect(ids.size).toBe(1);
    expect((await incident([...ids][0]!)).timeline.map((e: any) => e.kind)).toEqual(["opened", ...Array(19).fill("repeat")]);
  });

  it("status resolved records a recovery on the open incident and never resolves it; the same resolved post again is ignored", async () => {
    const res = await post(fixture("alertmanager/webhook-v4-resolved.json"));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ outcome: "recorded", incidentId });
    const again = await post(fixture("alertmanager/webhook-v4-resolved.json"));
    expect(again.status).toBe(200);
    expect(again.body.outcome).toBe("ignored");
    const got = await incident(incidentId);
    expect(got.state).toBe("open");
    expect(got.timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat", "repeat", "recovery"]);
    // Recorded when it arrived; the alerts' own end time is kept in its data.
    expect(Date.parse(got.timeline.at(-1).at)).toBeGreaterThan(Date.parse("2025-01-01T00:00:00Z"));
    expect(Date.parse(got.timeline.at(-1).data.occurredAt)).toBe(Date.parse("2024-06-12T10:24:47.513Z"));
  });

  it("status resolved with no open incident for the group is ignored, and nothing opens", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const resolved = fixture("alertmanager/webhook-v4-resolved.json");
    resolved.groupKey = `{}:{alertname="${unique("NeverFired")}"}`;
    const res = await post(resolved);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ outcome: "ignored", incidentId: null });
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
  });

  it("Grafana's contact-point Test button is answered 200 ignored with its reason, and nothing opens", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const res = await post(fixture("grafana/test-notification.json"));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ outcome: "ignored", incidentId: null, reason: "Grafana contact-point test notification" });
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
  });

  it("after a person resolves the incident, the same group opens a new one (202)", async () => {
    await resolveIncident(ctx.app, ctx.creds.owner, incidentId);
    const res = await post(fixture("alertmanager/webhook-v4-firing.json"));
    expect(res.status).toBe(202);
    expect(res.body.incidentId).not.toBe(incidentId);
  });

  it.each([
    ["critical", "sev1"],
    ["page", "sev2"],
    ["warning", "sev3"],
    ["info", "sev3"],
  ])("severity label %s is %s", async (severity, expected) => {
    const res = await post(group({ alertname: "DiskFilling", severity, service: "db" }));
    expect(res.status).toBe(202);
    expect(res.body.proposedSeverity).toBe(expected);
  });

  it("no severity label is sev3; no service label falls back to job; neither gives no entity", async () => {
    const byJob = await post(group({ alertname: "TargetDown", job: "node-exporter" }));
    expect(byJob.body).toMatchObject({ proposedSeverity: "sev3", entity: { kind: "service", id: "node-exporter" } });
    const serviceWins = await post(group({ alertname: "TargetDown", job: "node-exporter", service: "billing" }));
    expect(serviceWins.body.entity).toEqual({ kind: "service", id: "billing" });
    const neither = await post(group({ alertname: "Watchdog" }));
    expect(neither.status).toBe(202);
    expect(neither.body.entity).toBeNull();
  });

  it("the summary annotation is the row summary; unknown fields of newer versions are ignored", async () => {
    const body = {
      ...group({ alertname: "SlowQueries", severity: "page" }, { summary: "p99 query time above 2s", runbook_url: "https://runbooks.example.com/slow" }),
      version: "5",
      groupAnnotations: { team: "db" },
    };
    const res = await post(body);
    expect(res.status).toBe(202);
    const got = await incident(res.body.incidentId);
    expect(got).toMatchObject({ title: "SlowQueries", runbookUrl: "https://runbooks.example.com/slow" });
    expect(got.timeline[0].summary).toBe("p99 query time above 2s");
  });

  it("an active maintenance window answers 200 suppressed and opens nothing", async () => {
    await duringMaintenance(ctx.app, ctx.creds.owner, { sources: ["alert-router"] }, async () => {
      const res = await post(group({ alertname: "DuringMaintenance", severity: "critical" }));
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ outcome: "suppressed", incidentId: null });
    });
  });

  it("a body that is not an alert-router notification answers 422", async () => {
    const res = await post({ hello: "world" });
    expect(res.status).toBe(422);
    expect(res.body.error).toBe("Unrecognized trigger payload");
  });

  it("a missing or wrong secret answers 401, opens nothing, and the reason goes to the audit log", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const marker = new Date();
    const missing = await post(fixture("alertmanager/webhook-v4-firing.json"), null);
    const wrong = await post(fixture("alertmanager/webhook-v4-firing.json"), "f".repeat(64));
    const ingestTokenInstead = await post(fixture("alertmanager/webhook-v4-firing.json"), ctx.creds.ingestToken);
    for (const res of [missing, wrong, ingestTokenInstead]) {
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: "unauthorized" });
    }
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    // The secret decides the organization, so a missing or wrong one names none: the reason is
    // kept in the installation's audit log (no organization), which no organization's admin reads.
    // Failures from one address with one reason in one minute share a row, with a count.
    const rows = await db<{ data: { receiver: string; reason: string; count: number } }[]>`
      select data from identity.audit_events
      where kind = 'receiver.auth_failed' and org_id is null and at >= ${marker} and data->>'receiver' = 'alertrouter'`;
    expect(rows.flatMap((r) => Array(r.data.count).fill(r.data.reason)).sort()).toEqual(["secret missing", "secret wrong", "secret wrong"]);
  });

  it("a new secret replaces the old one at once", async () => {
    const old = ctx.creds.alertRouterSecret;
    const reissued = await ctx.app.call("POST", "/o/acme/triggers/alertrouter-secret", { token: ctx.creds.owner });
    expect(reissued.body.secret).toMatch(/^[0-9a-f]{64}$/);
    ctx.creds.alertRouterSecret = reissued.body.secret;
    expect((await post(group({ alertname: "Rotated" }), old)).status).toBe(401);
    expect((await post(group({ alertname: "Rotated" }))).status).toBe(202);
  });
}
