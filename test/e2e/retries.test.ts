import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callApi } from "../support/app.js";
import { fixture, getIncident, issueCredentials, MODES, startIntakeApp, unique, type Answer, type Credentials, type IntakeApp } from "./triggers-kit.js";

/**
 * A sender that times out and posts again: for every source, the same body twice at the same
 * time and twice 10 s apart, with and without an Idempotency-Key, over one process and over two
 * intake replicas behind two gateways (the two posts go to different gateways). Nothing opens
 * twice, a retry gets the first delivery's incident, and nothing is recorded twice except where
 * the spec records the same delivery again as a repeat (chat, alert-router).
 */

interface Delivery {
  source: string;
  path: string;
  body: unknown;
  headers: Record<string, string>;
  /**
   * exact: the retry gets the first answer word for word (same status, same incidentId).
   * held-event-id: the incident core holds the delivery's own event id, so a redelivery answers
   * as the spec's rows say (attached, same incidentId) and is not recorded again.
   * repeat: the spec makes the same delivery again a repeat (a chat message, an alert-router
   * group): attached to the same incident, and recorded as a repeat.
   */
  retry: "exact" | "held-event-id" | "repeat";
}

describe.each(MODES)("retries of every source (%s)", (mode) => {
  let app: IntakeApp;
  let creds: Credentials;
  let connectionId: string;

  beforeAll(async () => {
    app = await startIntakeApp(mode);
    creds = await issueCredentials(app);
    const created = await app.call("POST", "/o/acme/remote-sources", {
      token: creds.owner,
      body: { name: unique("retries"), baseUrl: "https://source.example.test", transport: "http", auth: { bearerToken: "t" }, tenantRef: "t" },
    });
    expect(created.status).toBe(201);
    connectionId = created.body.id;
  }, 120_000);

  afterAll(async () => {
    await app?.stop();
  });

  function deliveries(idempotencyKey?: string): Delivery[] {
    // A key of its own per delivery: a key names one body, and another body under it is refused.
    const key = (): Record<string, string> => (idempotencyKey ? { "idempotency-key": `${idempotencyKey}-${unique("k")}` } : {});
    const exact = idempotencyKey ? "exact" : undefined;
    const ingest = () => ({ authorization: `Bearer ${creds.ingestToken}`, ...key() });

    const metrics = { ...fixture("datadog/custom-body-triggered.json"), alert_id: unique("alert"), event_id: unique("event"), tags: ["service:checkout"] };

    const eventBridge = fixture("aws/eventbridge-cloudwatch-alarm-state-change.json");
    const alarm = unique("alarm");
    eventBridge.id = unique("eb");
    eventBridge.resources = [`arn:aws:cloudwatch:us-east-1:123456789012:alarm:${alarm}`];
    eventBridge.detail.alarmName = alarm;

    const logAlert = fixture("azure/common-schema-log-alerts-v2-fired.json");
    logAlert.data.essentials.alertId = `/subscriptions/x/providers/Microsoft.AlertsManagement/alerts/${unique("az")}`;
    logAlert.data.essentials.alertRule = unique("rule");
    logAlert.data.essentials.alertTargetIDs = [`/subscriptions/x/resourcegroups/rg/providers/microsoft.operationalinsights/workspaces/${unique("ws")}`];

    const sentry = fixture("sentry/event-alert-triggered.json");
    sentry.data.event.event_id = unique("sentry-event");

    const remote = {
      serviceSource: "remote",
      connectionId,
      title: "Burn rate",
      severity: "sev2",
      occurredAt: "2024-06-12T10:05:12Z",
      dedupKey: unique("burn"),
    };

    const firing = fixture("alertmanager/webhook-v4-firing.json");
    firing.groupKey = `{}:{alertname="${unique("Retry")}"}`;
    firing.alerts = firing.alerts.map((a: object) => ({ ...a, fingerprint: unique("fp") }));

    const chat = { channel_id: "C-retry", message_id: unique("msg"), text: "payments are down", author: "alice", emoji: "fire" };

    return [
      { source: "metrics-monitor", path: "/triggers", body: metrics, headers: ingest(), retry: exact ?? "held-event-id" },
      { source: "cloud-monitor", path: "/triggers", body: eventBridge, headers: ingest(), retry: exact ?? "held-event-id" },
      { source: "log-analytics", path: "/triggers", body: logAlert, headers: ingest(), retry: exact ?? "held-event-id" },
      { source: "error-tracker", path: "/triggers", body: sentry, headers: { ...ingest(), "request-id": unique("req") }, retry: "exact" },
      { source: "remote", path: "/triggers", body: remote, headers: ingest(), retry: exact ?? "held-event-id" },
      {
        source: "alert-router",
        path: "/triggers/alertrouter",
        body: firing,
        headers: { "x-service-alertrouter-secret": creds.alertRouterSecret, ...key() },
        retry: exact ?? "repeat",
      },
      { source: "chat", path: "/triggers/chat/acme", body: chat, headers: { "x-service-chat-secret": creds.chatSecret, ...key() }, retry: exact ?? "repeat" },
    ];
  }

  /** Posts through the gateway `which` (the cluster has two). */
  const send = (d: Delivery, which: number): Promise<Answer> =>
    callApi(app.gatewayUrls[which % app.gatewayUrls.length]!, "POST", d.path, {
      headers: { "content-type": "application/json", ...d.headers },
      raw: JSON.stringify(d.body),
    });

  async function expectRecognized(d: Delivery, first: Answer, retry: Answer): Promise<void> {
    const label = `${d.source} (${d.retry})`;
    expect(
      [first.status, retry.status].every((s) => s >= 200 && s < 300),
      `${label}: ${first.status} ${retry.status} ${JSON.stringify(retry.body)}`,
    ).toBe(true);
    expect(first.body.incidentId, label).toEqual(expect.any(String));
    expect(retry.body.incidentId, label).toBe(first.body.incidentId);
    if (d.retry === "exact") {
      // The first answer, word for word: both say opened, with the one incident.
      expect(retry.status, label).toBe(first.status);
      expect(retry.body, label).toEqual(first.body);
      expect(first.body.outcome, label).toBe("opened");
    } else {
      expect([first.body.outcome, retry.body.outcome].sort(), label).toEqual(["attached", "opened"]);
    }
    const incident = await getIncident(app, creds.owner, first.body.incidentId);
    expect(
      incident.timeline.map((e: { kind: string }) => e.kind),
      `${label}: ${d.retry === "repeat" ? "recorded as a repeat" : "recorded once"}`,
    ).toEqual(d.retry === "repeat" ? ["opened", "repeat"] : ["opened"]);
  }

  it.each([
    ["without", undefined],
    ["with", "idem"],
  ] as const)(
    "the same body twice at the same time, %s an Idempotency-Key, through two gateways",
    async (_label, idempotencyKey) => {
      for (const d of deliveries(idempotencyKey)) {
        const [a, b] = await Promise.all([send(d, 0), send(d, 1)]);
        const [first, retry] = a.body.outcome === "opened" ? [a, b] : [b, a];
        await expectRecognized(d, first, retry);
      }
    },
    120_000,
  );

  it("the same body twice 10 s apart, for every source, with and without an Idempotency-Key", async () => {
    const all = [...deliveries(), ...deliveries("idem-late")];
    const firsts = await Promise.all(all.map((d) => send(d, 0)));
    for (const [i, first] of firsts.entries())
      expect(first.status, `${all[i]!.source}: ${JSON.stringify(first.body)}`).toBe(all[i]!.source === "alert-router" ? 202 : 201);
    await new Promise((r) => setTimeout(r, 10_000));
    const retries = await Promise.all(all.map((d) => send(d, 1)));
    for (const [i, d] of all.entries()) await expectRecognized(d, firsts[i]!, retries[i]!);
  }, 120_000);
});
