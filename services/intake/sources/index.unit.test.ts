import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { alertRouterSource, chatSource, recognizeTrigger, SHARED_TRIGGER_ORDER } from "./index.js";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const fixture = (name: string): any => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8"));

describe("recognizeTrigger over every fixture", () => {
  it.each<[string, string | undefined]>([
    ["datadog/custom-body-triggered.json", "metrics-monitor"],
    ["datadog/custom-body-recovered.json", "metrics-monitor"],
    ["datadog/custom-body-no-data.json", "metrics-monitor"],
    ["aws/eventbridge-cloudwatch-alarm-state-change.json", "cloud-monitor"],
    ["aws/sns-notification-cloudwatch-alarm.json", "cloud-monitor"],
    ["azure/common-schema-metric-alert-resolved.json", "cloud-monitor"],
    ["azure/common-schema-log-alerts-v2-fired.json", "log-analytics"],
    ["sentry/event-alert-triggered.json", "error-tracker"],
    ["sentry/legacy-webhooks-plugin.json", "error-tracker"],
    // These have their own routes or are not accepted shapes on the shared endpoint: 422.
    ["alertmanager/webhook-v4-firing.json", undefined],
    ["alertmanager/webhook-v4-resolved.json", undefined],
    ["pagerduty/events-v2-trigger-full.json", undefined],
    ["slack/function-executed-custom-step.json", undefined],
    ["teams/workflows-adaptive-card-alert.json", undefined],
  ])("%s → %s", (file, badge) => {
    expect(recognizeTrigger(fixture(file))?.badge).toBe(badge);
  });

  it("the alert-router fixtures belong to the alert-router receiver", () => {
    expect(alertRouterSource.recognize(fixture("alertmanager/webhook-v4-firing.json"))).toBe(true);
    expect(alertRouterSource.recognize(fixture("alertmanager/webhook-v4-resolved.json"))).toBe(true);
  });

  it("every recognized fixture maps to an alert with the recognizing source's badge", () => {
    for (const file of [
      "datadog/custom-body-triggered.json",
      "aws/eventbridge-cloudwatch-alarm-state-change.json",
      "aws/sns-notification-cloudwatch-alarm.json",
      "azure/common-schema-metric-alert-resolved.json",
      "azure/common-schema-log-alerts-v2-fired.json",
      "sentry/event-alert-triggered.json",
    ]) {
      const body = fixture(file);
      const source = recognizeTrigger(body);
      expect(source?.map(body, { receivedAt: new Date() }).alert?.source, file).toBe(source?.badge);
    }
  });
});

describe("recognition order: remote, cloud-monitor, metrics-monitor, log-analytics, error-tracker", () => {
  it("the shared order is exactly that, without the receivers that have their own routes", () => {
    expect(SHARED_TRIGGER_ORDER.map((source) => source.badge)).toEqual(["remote", "cloud-monitor", "metrics-monitor", "log-analytics", "error-tracker"]);
    expect(SHARED_TRIGGER_ORDER).not.toContain(alertRouterSource);
    expect(SHARED_TRIGGER_ORDER).not.toContain(chatSource);
  });

  const sentryEvent = { data: { event: { event_id: "e", issue_id: "1" } } };
  const logAlert = fixture("azure/common-schema-log-alerts-v2-fired.json");

  it.each<[string, unknown, string]>([
    ["cloud-monitor before metrics-monitor", { ...fixture("aws/eventbridge-cloudwatch-alarm-state-change.json"), alert_type: "error" }, "cloud-monitor"],
    ["cloud-monitor (Azure metric) before metrics-monitor", { ...fixture("azure/common-schema-metric-alert-resolved.json"), tags: ["a:b"] }, "cloud-monitor"],
    ["metrics-monitor before log-analytics", { ...logAlert, tags: ["service:x"] }, "metrics-monitor"],
    ["metrics-monitor before error-tracker", { ...sentryEvent, alert_type: "error" }, "metrics-monitor"],
    ["log-analytics before error-tracker", { ...logAlert, ...sentryEvent, data: { ...logAlert.data, ...sentryEvent.data } }, "log-analytics"],
    ["remote before everything (explicit serviceSource)", { serviceSource: "remote", alert_type: "error", tags: [], ...sentryEvent }, "remote"],
  ])("%s", (_name, body, badge) => {
    expect(recognizeTrigger(body)?.badge).toBe(badge);
  });

  it.each<[string, unknown]>([
    ["empty object", {}],
    ["comma-separated tags without alert_type", { tags: "service:a" }],
    ["numeric alert_type", { alert_type: 1 }],
    ["null", null],
    ["array", [{ alert_type: "error" }]],
    ["number", 42],
    ["__proto__ carrying a shape", JSON.parse('{"__proto__": {"alert_type": "error", "serviceSource": "remote"}}')],
  ])("unrecognized: %s", (_name, body) => {
    expect(recognizeTrigger(body)).toBeUndefined();
  });
});
