import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditEvents, fixture, getIncident, listIncidents, postTrigger, PUBLIC_URL, unique, UUID, type SuiteContext } from "./triggers-kit.js";

/**
 * `POST /triggers` for the error-tracker, the remote-source payload, the cloud-monitor (CloudWatch
 * through EventBridge and SNS, Azure Monitor metric alerts) and log-analytics (Azure log search
 * alerts, the older Log Analytics webhook), with the fixtures.
 */

function withEvent(overrides: Record<string, unknown>, drop: string[] = []) {
  const body = fixture("sentry/event-alert-triggered.json");
  body.data.event = { ...body.data.event, event_id: unique("evt"), ...overrides };
  for (const field of drop) delete body.data.event[field];
  return body;
}

export function errorTrackerSuite(ctx: SuiteContext): void {
  const send = (body: unknown) => postTrigger(ctx.app, ctx.creds.ingestToken, body);
  const incident = (id: string) => getIncident(ctx.app, ctx.creds.owner, id);

  it("the issue-alert shape opens 201 with the event title, level error sev2, and no service for a numeric project", async () => {
    const body = fixture("sentry/event-alert-triggered.json");
    const res = await send(body);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      outcome: "opened",
      incidentId: expect.stringMatching(UUID),
      entity: null,
      proposedSeverity: "sev2",
      workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${res.body.incidentId}`,
      reason: null,
    });
    const got = await incident(res.body.incidentId);
    expect(got).toMatchObject({
      title: "ConnectionError: could not connect to payments-db:5432",
      severity: "sev2",
      state: "open",
      source: "error-tracker",
      entity: null,
    });
    expect(got.timeline).toHaveLength(1);
    expect(got.timeline[0]).toMatchObject({
      kind: "opened",
      // The culprit is added to the summary line.
      summary: "ConnectionError: could not connect to payments-db:5432 (culprit: checkout.payments.charge in submit_payment)",
      link: body.data.event.web_url,
      alertRef: "5123498765",
      // data.event.timestamp, epoch seconds with a fraction: when the problem started.
      at: "2024-06-12T10:05:12.348Z",
    });
  });

  it("every delivery opens its own incident; a retry of one (same event id and Request-ID) answers 201 with its incident", async () => {
    const body = withEvent({});
    const first = await postTrigger(ctx.app, ctx.creds.ingestToken, body, { headers: { "request-id": "req-1" } });
    const retry = await postTrigger(ctx.app, ctx.creds.ingestToken, body, { headers: { "request-id": "req-1" } });
    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.body).toEqual(first.body);
    // Another delivery (another alert rule on the same event) is its own.
    const other = await postTrigger(ctx.app, ctx.creds.ingestToken, body, { headers: { "request-id": "req-2" } });
    expect(other.status).toBe(201);
    expect(other.body.outcome).toBe("opened");
    expect(other.body.incidentId).not.toBe(first.body.incidentId);
    // Another event: its own incident too.
    const next = await send(withEvent({}));
    expect(next.body.incidentId).not.toBe(first.body.incidentId);
    const unchanged = await incident(first.body.incidentId);
    expect(unchanged.state).toBe("open");
    expect(unchanged.timeline).toHaveLength(1);
  });

  it("the older per-project plugin shape (project_slug beside the event id): project_slug is the affected service", async () => {
    const res = await send(fixture("sentry/legacy-webhooks-plugin.json"));
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ outcome: "opened", entity: { kind: "service", id: "checkout-api" }, proposedSeverity: "sev2" });
    const got = await incident(res.body.incidentId);
    expect(got).toMatchObject({
      source: "error-tracker",
      title: "ConnectionError: could not connect to payments-db:5432",
      entity: { kind: "service", id: "checkout-api" },
    });
    expect(got.timeline[0].link).toBe("https://acme.sentry.io/issues/5123498765/?referrer=webhooks_plugin");
  });

  it("recognized by data.event.event_id with issue_url alone, and with issue_id alone", async () => {
    const urlOnly = await send(withEvent({}, ["issue_id"]));
    expect(urlOnly.status).toBe(201);
    const idOnly = await send(withEvent({}, ["issue_url"]));
    expect(idOnly.status).toBe(201);
    for (const id of [urlOnly.body.incidentId, idOnly.body.incidentId]) expect((await incident(id)).source).toBe("error-tracker");
    // Neither: not this shape, and no other.
    const neither = await send(withEvent({}, ["issue_id", "issue_url"]));
    expect(neither.status).toBe(422);
    expect(neither.body).toEqual({ error: "Unrecognized trigger payload" });
  });

  it.each([
    ["title", { title: "T: from title", message: "from message", culprit: "from culprit" }, [], "T: from title"],
    ["message", { message: "from message", culprit: "from culprit" }, ["title"], "from message"],
    ["culprit", { message: "", culprit: "from culprit" }, ["title"], "from culprit"],
    ["a generic error-issue title", {}, ["title", "message", "culprit"], "New error issue"],
  ] as const)("the title is data.event.%s when the fields before it are missing", async (_which, overrides, drop, title) => {
    const res = await send(withEvent(overrides, [...drop]));
    expect(res.status).toBe(201);
    expect((await incident(res.body.incidentId)).title).toBe(title);
  });

  it.each([
    ["fatal", "sev1"],
    ["error", "sev2"],
    ["warning", "sev3"],
    ["info", "sev3"],
    ["debug", "sev3"],
  ])("level %s is %s", async (level, severity) => {
    const res = await send(withEvent({ level }));
    expect(res.status).toBe(201);
    expect(res.body.proposedSeverity).toBe(severity);
  });

  it("a delivery straight from the error-tracker carries no Authorization header and gets 401 Missing trigger ingest token; nothing opens", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const res = await ctx.app.call("POST", "/triggers", {
      headers: {
        "content-type": "application/json",
        "sentry-hook-resource": "event_alert",
        "sentry-hook-timestamp": "1718186713",
        "sentry-hook-signature": "0".repeat(64),
      },
      raw: JSON.stringify(fixture("sentry/event-alert-triggered.json")),
    });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: "Missing trigger ingest token" });
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
  });

  it("its signature header is not checked: a wrong signature with the ingest token opens", async () => {
    const res = await postTrigger(ctx.app, ctx.creds.ingestToken, undefined, { raw: JSON.stringify(withEvent({})) });
    expect(res.status).toBe(201);
  });

  it("resolving the issue in the error-tracker records nothing", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const resolved = {
      action: "resolved",
      actor: { id: "u_81723", name: "Dana", type: "user" },
      data: {
        issue: {
          id: "5123498765",
          status: "resolved",
          title: "ConnectionError: could not connect to payments-db:5432",
          project: { id: "4504123456789504", slug: "checkout-api" },
        },
      },
      installation: { uuid: "7a485448-a9e2-4c85-8a3c-4f44175783c9" },
    };
    const res = await send(resolved);
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ error: "Unrecognized trigger payload" });
    const after = await listIncidents(ctx.app, ctx.creds.owner);
    expect(after).toHaveLength(before.length);
    expect(after.filter((i) => i.state !== "open" && i.source === "error-tracker")).toHaveLength(0);
  });
}

export function remoteSourceSuite(ctx: SuiteContext): void {
  const send = (body: unknown) => postTrigger(ctx.app, ctx.creds.ingestToken, body);
  const incident = (id: string) => getIncident(ctx.app, ctx.creds.owner, id);
  let connectionId: string;
  let otherConnectionId: string;

  async function createConnection(name: string): Promise<string> {
    const res = await ctx.app.call("POST", "/o/acme/remote-sources", {
      token: ctx.creds.owner,
      body: { name, baseUrl: "https://source.example.test", transport: "http", auth: { bearerToken: "source-token" }, tenantRef: `tenant-${name}` },
    });
    if (res.status !== 201 && res.status !== 200) throw new Error(`creating a remote source: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.id as string;
  }

  beforeAll(async () => {
    connectionId = await createConnection(unique("metrics"));
    otherConnectionId = await createConnection(unique("logs"));
  });

  const full = (overrides: Record<string, unknown> = {}) => ({
    serviceSource: "remote",
    connectionId,
    title: "Error budget burn on payments",
    severity: "sev1",
    occurredAt: "2024-06-12T10:05:12Z",
    entityHints: ["service:payments", "host:db-1"],
    dedupKey: unique("burn"),
    summary: "2% of the monthly budget in the last hour",
    url: "https://source.example.com/alerts/burn",
    kind: "trigger",
    ...overrides,
  });

  it("all fields: 201 opened, severity, the first entity hint, and the summary, link, dedupKey and time on the first entry", async () => {
    const body = full();
    const res = await send(body);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      outcome: "opened",
      incidentId: expect.stringMatching(UUID),
      entity: { kind: "service", id: "payments" },
      proposedSeverity: "sev1",
      workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${res.body.incidentId}`,
      reason: null,
    });
    const got = await incident(res.body.incidentId);
    expect(got).toMatchObject({ title: body.title, severity: "sev1", source: "remote", entity: { kind: "service", id: "payments" } });
    expect(got.timeline[0]).toMatchObject({
      kind: "opened",
      summary: body.summary,
      link: body.url,
      alertRef: body.dedupKey,
      at: "2024-06-12T10:05:12Z",
      data: { connectionId, dedupKey: body.dedupKey, kind: "trigger", entityHints: ["service:payments", "host:db-1"] },
    });
  });

  it("the same dedupKey attaches and records a repeat; a redelivery attaches and is not recorded again", async () => {
    const dedupKey = unique("latency");
    const opened = await send(full({ dedupKey }));
    expect(opened.status).toBe(201);
    const repeat = await send(full({ dedupKey, occurredAt: "2024-06-12T10:10:12Z" }));
    expect(repeat.status).toBe(200);
    expect(repeat.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    const redelivered = await send(full({ dedupKey, occurredAt: "2024-06-12T10:10:12Z" }));
    expect(redelivered.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    expect((await incident(opened.body.incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
  });

  it("kind recovery with the alert's dedupKey records a recovery (the room stays open); again, or with no open room, it is ignored", async () => {
    const dedupKey = unique("saturation");
    const opened = await send(full({ dedupKey }));
    const recovery = full({ dedupKey, kind: "recovery", occurredAt: "2024-06-12T10:30:00Z" });
    const recorded = await send(recovery);
    expect(recorded.status).toBe(200);
    expect(recorded.body).toMatchObject({ outcome: "recorded", incidentId: opened.body.incidentId });
    const again = await send(recovery);
    expect(again.status).toBe(200);
    expect(again.body.outcome).toBe("ignored");
    const got = await incident(opened.body.incidentId);
    expect(got.state).toBe("open");
    expect(got.timeline.map((e: any) => e.kind)).toEqual(["opened", "recovery"]);
    const nothingOpen = await send(full({ dedupKey: unique("never"), kind: "recovery" }));
    expect(nothingOpen.status).toBe(200);
    expect(nothingOpen.body).toMatchObject({ outcome: "ignored", incidentId: null });
  });

  it("each connection has its own identity: the same dedupKey on another connection opens its own incident", async () => {
    const dedupKey = unique("shared-key");
    const first = await send(full({ dedupKey }));
    const other = await send(full({ dedupKey, connectionId: otherConnectionId }));
    expect([first.status, other.status]).toEqual([201, 201]);
    expect(other.body.incidentId).not.toBe(first.body.incidentId);
  });

  it("only the required fields: opens with no entity, and the title stands in for a missing dedupKey", async () => {
    const title = unique("Disk pressure");
    const minimal = { serviceSource: "remote", connectionId, title, severity: "sev4" };
    const first = await send(minimal);
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ entity: null, proposedSeverity: "sev4" });
    const second = await send(minimal);
    expect(second.body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });
  });

  it.each([
    ["connectionId missing", { connectionId: undefined }, "connectionId is required"],
    ["title missing", { title: undefined }, "title is required"],
    ["severity missing", { severity: undefined }, "severity is required"],
    ["severity invalid", { severity: "critical" }, "severity must be one of sev1, sev2, sev3, sev4"],
    ["kind invalid", { kind: "resolve" }, "kind must be trigger or recovery"],
    ["occurredAt not RFC 3339", { occurredAt: "yesterday" }, "occurredAt must be an RFC 3339 timestamp"],
    ["an entity hint without a kind", { entityHints: ["payments"] }, "entityHints[0] must be kind:value"],
  ])("%s: 422 naming the field, and no incident", async (_case, overrides, message) => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const res = await send(full(overrides));
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ error: message });
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
  });

  it("an unknown connectionId: 422 naming connectionId, and no incident", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    for (const unknown of ["00000000-0000-4000-8000-000000000000", "not-a-connection"]) {
      const res = await send(full({ connectionId: unknown }));
      expect(res.status, unknown).toBe(422);
      expect(res.body.error).toBe(`connectionId "${unknown}" is not a remote source of this organization`);
    }
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
  });
}

export function cloudAndLogSuite(ctx: SuiteContext): void {
  const send = (body: unknown, contentType?: string) =>
    postTrigger(ctx.app, ctx.creds.ingestToken, undefined, { raw: JSON.stringify(body), ...(contentType ? { contentType } : {}) });
  const incident = (id: string) => getIncident(ctx.app, ctx.creds.owner, id);
  const SNS = "text/plain; charset=UTF-8";

  /** The EventBridge fixture for another alarm (or the fixture's own), in `state` at `at`. */
  function eventBridge(state: string, at: string, alarmName = "checkout-api-5xx-rate") {
    const body = fixture("aws/eventbridge-cloudwatch-alarm-state-change.json");
    body.id = unique("eb");
    body.resources = [`arn:aws:cloudwatch:us-east-1:123456789012:alarm:${alarmName}`];
    body.detail.alarmName = alarmName;
    body.detail.state = { ...body.detail.state, value: state, timestamp: at };
    return body;
  }

  function sns(state: string, at: string) {
    const body = fixture("aws/sns-notification-cloudwatch-alarm.json");
    const message = JSON.parse(body.Message);
    body.MessageId = unique("sns");
    body.Message = JSON.stringify({ ...message, NewStateValue: state, StateChangeTime: at });
    return body;
  }

  describe("CloudWatch alarms", () => {
    let incidentId: string;

    it("EventBridge ALARM opens 201 cloud-monitor with the alarm name, sev3 and the target group as entity", async () => {
      const body = fixture("aws/eventbridge-cloudwatch-alarm-state-change.json");
      const res = await send(body);
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({
        outcome: "opened",
        entity: { kind: "resource", id: "targetgroup/checkout-api/943f017f100becff" },
        proposedSeverity: "sev3",
        workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${res.body.incidentId}`,
      });
      incidentId = res.body.incidentId;
      const got = await incident(incidentId);
      expect(got).toMatchObject({ title: "checkout-api-5xx-rate", source: "cloud-monitor", severity: "sev3" });
      expect(got.timeline[0]).toMatchObject({
        kind: "opened",
        alertRef: "arn:aws:cloudwatch:us-east-1:123456789012:alarm:checkout-api-5xx-rate",
        at: "2024-06-12T10:05:44.312Z",
      });
      expect(got.timeline[0].summary).toContain("Threshold Crossed");
    });

    it("the same state change through SNS (text/plain) attaches to the same incident, keyed by the alarm ARN, and is not recorded twice", async () => {
      const res = await send(fixture("aws/sns-notification-cloudwatch-alarm.json"), SNS);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ outcome: "attached", incidentId });
      expect((await incident(incidentId)).timeline).toHaveLength(1);
    });

    it("a later ALARM through SNS attaches and records a repeat", async () => {
      const res = await send(sns("ALARM", "2024-06-12T10:09:44.312+0000"), SNS);
      expect(res.body).toMatchObject({ outcome: "attached", incidentId });
      expect((await incident(incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
    });

    it("INSUFFICIENT_DATA records a no-data notice; OK records a recovery; the incident stays open", async () => {
      const noData = await send(sns("INSUFFICIENT_DATA", "2024-06-12T10:12:44.312+0000"), SNS);
      expect(noData.status).toBe(200);
      expect(noData.body).toMatchObject({ outcome: "recorded", incidentId });
      const ok = eventBridge("OK", "2024-06-12T10:15:44.312+0000");
      const recovered = await send(ok);
      expect(recovered.status).toBe(200);
      expect(recovered.body).toMatchObject({ outcome: "recorded", incidentId });
      // The same OK again (EventBridge retried it) is already held.
      const again = await send({ ...ok, id: unique("eb") });
      expect(again.body.outcome).toBe("ignored");
      const got = await incident(incidentId);
      expect(got.state).toBe("open");
      expect(got.timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat", "no_data", "recovery"]);
    });

    it("OK and INSUFFICIENT_DATA for an alarm with no open incident are ignored; nothing opens", async () => {
      const before = await listIncidents(ctx.app, ctx.creds.owner);
      const alarm = unique("quiet-alarm");
      for (const state of ["OK", "INSUFFICIENT_DATA"]) {
        const res = await send(eventBridge(state, "2024-06-12T11:00:00.000+0000", alarm));
        expect(res.status).toBe(200);
        expect(res.body.outcome).toBe("ignored");
      }
      expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    });
  });

  describe("SNS subscription handshake", () => {
    let server: Server;
    let fetched = 0;

    beforeAll(async () => {
      server = createServer((_req, res) => {
        fetched += 1;
        res.end("ok");
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    });

    afterAll(async () => {
      await new Promise((resolve) => server.close(resolve));
    });

    it("a SubscriptionConfirmation is answered 200 ignored without fetching its URL; the token is kept for an operator", async () => {
      const port = (server.address() as AddressInfo).port;
      const token = unique("sns-token");
      const confirmation = {
        Type: "SubscriptionConfirmation",
        MessageId: unique("msg"),
        Token: token,
        TopicArn: "arn:aws:sns:us-east-1:123456789012:ops-alarms",
        Message:
          "You have chosen to subscribe to the topic arn:aws:sns:us-east-1:123456789012:ops-alarms.\nTo confirm the subscription, visit the SubscribeURL included in this message.",
        SubscribeURL: `http://127.0.0.1:${port}/?Action=ConfirmSubscription&Token=${token}`,
        Timestamp: "2024-06-12T10:00:00.000Z",
        SignatureVersion: "1",
        Signature: "EXAMPLE",
        SigningCertURL: `http://127.0.0.1:${port}/cert.pem`,
      };
      const before = await listIncidents(ctx.app, ctx.creds.owner);
      const res = await postTrigger(ctx.app, ctx.creds.ingestToken, undefined, {
        raw: JSON.stringify(confirmation),
        contentType: SNS,
      });
      expect(res.status).toBe(200);
      expect(res.body.outcome).toBe("ignored");
      expect(res.body.reason).toEqual(expect.any(String));
      const notices = await auditEvents(ctx.app, ctx.creds.owner, "trigger.sns_subscription_notice", (events) => events.some((e) => e.data.token === token));
      const notice = notices.find((e) => e.data.token === token);
      expect(notice.data).toMatchObject({ messageType: "SubscriptionConfirmation", topicArn: confirmation.TopicArn, token });
      // Not an SNS API address: not even shown.
      expect(notice.data.subscribeUrl).toBeUndefined();
      await new Promise((r) => setTimeout(r, 300));
      expect(fetched).toBe(0);
      expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    });
  });

  describe("Azure Monitor", () => {
    it("a log search alert (common schema, signal Log) Fired opens 201 log-analytics; Resolved records a recovery", async () => {
      const fired = fixture("azure/common-schema-log-alerts-v2-fired.json");
      const res = await send(fired);
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({ outcome: "opened", entity: { kind: "resource", id: "vm-checkout-01" }, proposedSeverity: "sev2" });
      const got = await incident(res.body.incidentId);
      expect(got).toMatchObject({ title: "checkout-5xx-in-app-logs", source: "log-analytics", severity: "sev2" });
      expect(got.timeline[0]).toMatchObject({
        summary: "More than 20 HTTP 5xx in AppServiceHTTPLogs over 10 minutes",
        link: fired.data.alertContext.condition.allOf[0].linkToFilteredSearchResultsUI,
        alertRef: fired.data.essentials.alertId,
      });
      // The same notification again (Azure retries) attaches and is not recorded twice.
      const retried = await send(fired);
      expect(retried.body).toMatchObject({ outcome: "attached", incidentId: res.body.incidentId });

      const resolved = fixture("azure/common-schema-log-alerts-v2-fired.json");
      resolved.data.essentials.monitorCondition = "Resolved";
      resolved.data.essentials.resolvedDateTime = "2024-06-12T10:27:49.1234567Z";
      const recovery = await send(resolved);
      expect(recovery.status).toBe(200);
      expect(recovery.body).toMatchObject({ outcome: "recorded", incidentId: res.body.incidentId });
      const after = await incident(res.body.incidentId);
      expect(after.state).toBe("open");
      expect(after.timeline.map((e: any) => e.kind)).toEqual(["opened", "recovery"]);
    });

    it("a metric alert Resolved with nothing open is ignored; Fired opens cloud-monitor; the Resolved fixture then records a recovery", async () => {
      const resolved = fixture("azure/common-schema-metric-alert-resolved.json");
      const early = await send(resolved);
      expect(early.status).toBe(200);
      expect(early.body.outcome).toBe("ignored");

      const fired = fixture("azure/common-schema-metric-alert-resolved.json");
      fired.data.essentials.monitorCondition = "Fired";
      delete fired.data.essentials.resolvedDateTime;
      const opened = await send(fired);
      expect(opened.status).toBe(201);
      expect(opened.body).toMatchObject({ entity: { kind: "resource", id: "vm-checkout-01" }, proposedSeverity: "sev3" });
      expect(await incident(opened.body.incidentId)).toMatchObject({ source: "cloud-monitor", title: "vm-checkout-high-cpu" });

      const recovery = await send(resolved);
      expect(recovery.body).toMatchObject({ outcome: "recorded", incidentId: opened.body.incidentId });
      const again = await send(resolved);
      expect(again.body.outcome).toBe("ignored");
    });

    it("the older Log Analytics webhook opens log-analytics, and each firing of the rule lands on the same incident", async () => {
      const rule = unique("Failed logins");
      const firing = (start: string, end: string) => ({
        SubscriptionId: "6f2c9a1e-4b7d-4c3a-9e8f-1a2b3c4d5e6f",
        AlertRuleName: rule,
        SearchQuery: "SigninLogs | where ResultType != 0",
        SearchIntervalStartTimeUtc: start,
        SearchIntervalEndtimeUtc: end,
        AlertThresholdOperator: "Greater Than",
        AlertThresholdValue: 10,
        ResultCount: 42,
        SearchIntervalInSeconds: 300,
        LinkToSearchResults: "https://portal.azure.com/#Analytics?q=SigninLogs",
        Description: "More than 10 failed sign-ins in 5 minutes",
        Severity: "Critical",
        AffectedConfigurationItems: ["auth-gateway"],
        AlertType: "Number of results",
        WorkspaceId: "b1c2d3e4-0000-4000-8000-000000000001",
      });
      const first = await send(firing("2024-06-12T10:00:00Z", "2024-06-12T10:05:00Z"));
      expect(first.status).toBe(201);
      expect(first.body).toMatchObject({ entity: { kind: "resource", id: "auth-gateway" } });
      expect(await incident(first.body.incidentId)).toMatchObject({ source: "log-analytics", title: rule });
      const next = await send(firing("2024-06-12T10:05:00Z", "2024-06-12T10:10:00Z"));
      expect(next.body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });
      const redelivered = await send(firing("2024-06-12T10:05:00Z", "2024-06-12T10:10:00Z"));
      expect(redelivered.body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });
      expect((await incident(first.body.incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
    });
  });
}
