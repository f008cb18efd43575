import { callApi } from "../support/app.js";
import { fixture, type Answer, type Credentials } from "./triggers-kit.js";

/**
 * One problem as five tools report it: a metrics monitor (Datadog's webhook), the alert router
 * (Alertmanager, as Grafana's Alertmanager-compatible contact point also posts), PagerDuty Events
 * v2 and Opsgenie senders, and an error tracker (Sentry), each naming the same service.
 */
export const FIVE_SOURCES = ["metrics-monitor", "alert-router", "pagerduty-events", "opsgenie", "error-tracker"] as const;
export type FiveSource = (typeof FIVE_SOURCES)[number];

/** Delivery `n` of `source` about `service`, posted to the gateway at `baseUrl`. */
export function sendAs(baseUrl: string, creds: Credentials, source: FiveSource, service: string, run: string, n: number): Promise<Answer> {
  const json = (path: string, body: unknown, headers: Record<string, string>) =>
    callApi(baseUrl, "POST", path, { raw: JSON.stringify(body), headers: { "content-type": "application/json", ...headers } });
  switch (source) {
    case "metrics-monitor":
      return json(
        "/triggers",
        {
          title: `[Triggered] High latency on ${service}`,
          alert_type: "error",
          alert_transition: "Triggered",
          alert_id: `${run}-latency`,
          event_id: `${run}-dd-${n}`,
          priority: "P2",
          tags: [`service:${service}`, "env:prod"],
          body: "p99 above 2 s",
        },
        { authorization: `Bearer ${creds.ingestToken}` },
      );
    case "alert-router": {
      const body = fixture("alertmanager/webhook-v4-firing.json");
      body.groupKey = `{}:{alertname="HighErrorRate",run="${run}"}`;
      for (const alert of body.alerts) alert.labels.service = service;
      body.commonLabels.service = service;
      return json("/triggers/alertrouter", body, { "x-service-alertrouter-secret": creds.alertRouterSecret });
    }
    case "pagerduty-events":
      return json(
        "/v2/enqueue",
        {
          routing_key: creds.ingestToken,
          event_action: "trigger",
          dedup_key: `${run}-pd`,
          payload: { summary: `${service} is failing health checks`, source: "grafana", severity: "critical", component: service },
        },
        {},
      );
    case "opsgenie":
      return json(
        "/v2/alerts",
        { message: `${service} error budget burning`, alias: `${run}-og`, tags: [`service:${service}`], priority: "P2" },
        { authorization: `GenieKey ${creds.ingestToken}` },
      );
    case "error-tracker": {
      const body = fixture("sentry/legacy-webhooks-plugin.json");
      body.project_slug = service;
      body.event.event_id = `${run}sentry${n}`;
      body.event.id = body.event.event_id;
      return json("/triggers", body, { authorization: `Bearer ${creds.ingestToken}` });
    }
  }
}
