import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import * as alertRouter from "./alert-router.js";
import { PayloadError } from "../payload-error.js";
import type { AlertInit } from "../types.js";

const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const fixture = (name: string): any => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8"));
const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };

const GROUP_KEY = '{}/{severity="critical"}:{alertname="HighErrorRate", namespace="checkout"}';

function alertOf(body: unknown): AlertInit {
  const delivery = alertRouter.map(body, context);
  if (!delivery.alert) throw new Error(`expected an alert, got ${JSON.stringify(delivery)}`);
  return delivery.alert;
}

/** A one-alert notification with the given label sets. */
function notification(parts: {
  commonLabels?: Record<string, string>;
  groupLabels?: Record<string, string>;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  commonAnnotations?: Record<string, string>;
  status?: string;
}) {
  return {
    version: "4",
    groupKey: '{}:{alertname="X"}',
    status: parts.status ?? "firing",
    receiver: "intake",
    groupLabels: parts.groupLabels ?? {},
    commonLabels: parts.commonLabels ?? {},
    commonAnnotations: parts.commonAnnotations ?? {},
    externalURL: "http://router.example.com",
    alerts: [
      {
        status: parts.status ?? "firing",
        labels: parts.labels ?? {},
        annotations: parts.annotations ?? {},
        startsAt: "2024-06-12T10:00:00Z",
        endsAt: "0001-01-01T00:00:00Z",
        fingerprint: "f1",
      },
    ],
  };
}

describe("alert-router fixtures", () => {
  it("firing notification opens on the group key", () => {
    const body = fixture("alertmanager/webhook-v4-firing.json");
    expect(alertRouter.recognize(body)).toBe(true);
    const alert = alertOf(body);
    expect(alert).toMatchObject({
      source: "alert-router",
      attachIdentity: `alert-router:${GROUP_KEY}`,
      // Every firing notification of the group records a repeat: no event identifier.
      eventId: "",
      kind: "alert",
      title: "HighErrorRate",
      severity: "sev1",
      // Not common to the group, so the first alert's service speaks for it; all are kept in data.
      entity: { kind: "service", id: "checkout-api" },
      summary: "checkout-api 5xx ratio above 5%",
      runbookUrl: "https://runbooks.example.com/HighErrorRate",
      alertRef: GROUP_KEY,
      occurredAt: expect.objectContaining({ seconds: 1718186537n, nanos: 513_000_000 }),
    });
    expect(alert.link).toMatch(/^http:\/\/prometheus-k8s-0:9090\/graph/);
    expect(alert.data).toMatchObject({ receiver: "alert-intake", alertCount: 2, services: ["checkout-api", "checkout-worker"] });
  });

  it("resolved notification is a recovery on the same group, at the last alert's end", () => {
    const firing = alertOf(fixture("alertmanager/webhook-v4-firing.json"));
    const resolved = alertOf(fixture("alertmanager/webhook-v4-resolved.json"));
    expect(resolved.kind).toBe("recovery");
    expect(resolved.attachIdentity).toBe(firing.attachIdentity);
    expect(resolved.eventId).toMatch(/^[0-9a-f]{64}$/);
    expect(resolved.occurredAt).toMatchObject({ seconds: 1718187887n, nanos: 513_000_000 });
  });

  it("a firing notification sent again (repeat interval or retry) carries no event id, so it records a repeat", () => {
    const body = fixture("alertmanager/webhook-v4-firing.json");
    expect(alertOf(body).eventId).toBe("");
    expect(alertOf(fixture("alertmanager/webhook-v4-firing.json")).eventId).toBe("");
  });

  it("a retried resolved notification has the same event id, whatever the order of its alerts", () => {
    const body = fixture("alertmanager/webhook-v4-resolved.json");
    const reordered = fixture("alertmanager/webhook-v4-resolved.json");
    reordered.alerts.reverse();
    expect(alertOf(reordered).eventId).toBe(alertOf(body).eventId);
  });

  it("a changed resolved group (alert added, restarted or ended later) is a new notification", () => {
    const body = fixture("alertmanager/webhook-v4-resolved.json");
    const restarted = fixture("alertmanager/webhook-v4-resolved.json");
    restarted.alerts[1].startsAt = "2024-06-12T11:00:00Z";
    const shrunk = fixture("alertmanager/webhook-v4-resolved.json");
    shrunk.alerts.pop();
    expect(alertOf(restarted).eventId).not.toBe(alertOf(body).eventId);
    expect(alertOf(shrunk).eventId).not.toBe(alertOf(body).eventId);
  });

  it("Grafana's contact-point Test button is a test: answered ignored, no incident", () => {
    const test = fixture("grafana/test-notification.json");
    expect(alertRouter.map(test, context)).toEqual({ outcome: "ignored", reason: "Grafana contact-point test notification" });
    // A real alert that happens to share the test's name is not a test.
    const real = fixture("grafana/test-notification.json");
    real.alerts[0].labels.instance = "db-01";
    expect(alertRouter.map(real, context).outcome).toBeUndefined();
  });

  it("fields newer versions add are ignored", () => {
    const body = { ...fixture("alertmanager/webhook-v4-firing.json"), groupAnnotations: { x: "y" }, version: "5" };
    expect(alertOf(body).title).toBe("HighErrorRate");
  });
});

describe("alert-router mapping rules", () => {
  it.each<[string, Parameters<typeof notification>[0], string]>([
    ["commonLabels first", { commonLabels: { alertname: "A" }, groupLabels: { alertname: "B" }, labels: { alertname: "C" } }, "A"],
    ["then groupLabels", { groupLabels: { alertname: "B" }, labels: { alertname: "C" } }, "B"],
    ["then the first alert", { labels: { alertname: "C" } }, "C"],
    ["none", {}, alertRouter.DEFAULT_TITLE],
  ])("title from alertname: %s", (_name, parts, title) => {
    expect(alertOf(notification(parts)).title).toBe(title);
  });

  it.each<[string | undefined, string]>([
    ["critical", "sev1"],
    ["page", "sev2"],
    ["warning", "sev3"],
    ["info", "sev3"],
    ["none", "sev3"],
    [undefined, "sev3"],
  ])("severity label %j → %s", (severity, expected) => {
    const labels: Record<string, string> = severity === undefined ? {} : { severity };
    expect(alertOf(notification({ labels })).severity).toBe(expected);
    expect(alertOf(notification({ commonLabels: labels })).severity).toBe(expected);
  });

  it.each<[string, Parameters<typeof notification>[0], { kind: string; id: string } | undefined]>([
    ["service label", { commonLabels: { service: "checkout", job: "node" } }, { kind: "service", id: "checkout" }],
    ["job when no service", { commonLabels: { job: "node-exporter" } }, { kind: "service", id: "node-exporter" }],
    ["service on the alert beats job in common labels", { commonLabels: { job: "node" }, labels: { service: "api" } }, { kind: "service", id: "api" }],
    ["neither", { commonLabels: { env: "prod" } }, undefined],
    ["blank service falls back to job", { labels: { service: " ", job: "batch" } }, { kind: "service", id: "batch" }],
  ])("entity: %s", (_name, parts, entity) => {
    expect(alertOf(notification(parts)).entity).toEqual(entity);
  });

  it("summary and runbook_url annotations", () => {
    const alert = alertOf(
      notification({
        commonAnnotations: { summary: "group summary" },
        annotations: { summary: "alert summary", runbook_url: "https://runbooks.example.com/x" },
      }),
    );
    expect(alert.summary).toBe("group summary");
    expect(alert.runbookUrl).toBe("https://runbooks.example.com/x");
    expect(alertOf(notification({ annotations: { runbook_url: "javascript:alert(1)" } })).runbookUrl).toBeUndefined();
  });

  it("status resolved is a recovery, anything else an alert", () => {
    expect(alertOf(notification({ status: "resolved" })).kind).toBe("recovery");
    expect(alertOf(notification({ status: "firing" })).kind).toBe("alert");
  });

  it("the group key is the attach identity", () => {
    expect(alertOf(notification({})).attachIdentity).toBe('alert-router:{}:{alertname="X"}');
  });

  it("the zero end time of a firing alert is no time", () => {
    const body = notification({ status: "resolved" });
    expect(alertOf(body).occurredAt).toBeUndefined();
  });

  it("labels named __proto__ are ordinary labels", () => {
    const body = JSON.parse(
      JSON.stringify(notification({ commonLabels: { alertname: "A" } })).replace('"commonLabels":{', '"commonLabels":{"__proto__":{"x":1},'),
    );
    const alert = alertOf(body);
    expect(alert.title).toBe("A");
    expect(Object.getPrototypeOf(alert.data?.commonLabels)).toBe(Object.prototype);
  });
});

describe("alert-router recognition and refusals", () => {
  it.each<[unknown, boolean]>([
    [{ groupKey: "g", alerts: [] }, true],
    [{ groupKey: "g" }, false],
    [{ alerts: [] }, false],
    [{ groupKey: 5, alerts: [] }, false],
    [{ groupKey: "g", alerts: {} }, false],
    [null, false],
  ])("%j → %s", (body, expected) => {
    expect(alertRouter.recognize(body)).toBe(expected);
  });

  it("a blank group key is refused naming it", () => {
    expect(() => alertRouter.map({ groupKey: " ", alerts: [] }, context)).toThrow(new PayloadError("groupKey", "groupKey is required"));
  });

  it("alerts that are not an array are refused", () => {
    expect(() => alertRouter.map({ groupKey: "g", alerts: "x" }, context)).toThrow(PayloadError);
  });

  it("an empty group still maps", () => {
    expect(alertOf({ groupKey: "g", alerts: [] })).toMatchObject({ title: alertRouter.DEFAULT_TITLE, severity: "sev3" });
  });
});
