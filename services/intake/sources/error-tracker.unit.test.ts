import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import * as errorTracker from "./error-tracker.js";
import { PayloadError } from "./payload-error.js";
import type { AlertInit } from "./types.js";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const fixture = (name: string): Record<string, unknown> => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8")) as Record<string, unknown>;
const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };

function alertOf(body: unknown): AlertInit {
  const delivery = errorTracker.map(body, context);
  if (!delivery.alert) throw new Error(`expected an alert, got ${JSON.stringify(delivery)}`);
  return delivery.alert;
}

/** An integration-platform issue alert with `event` fields replaced. */
function issueAlert(event: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return { action: "triggered", data: { event: { event_id: "ev-1", issue_id: "17", ...event } }, ...extra };
}

function isoOf(alert: AlertInit): string | undefined {
  const occurred = alert.occurredAt as { seconds: bigint; nanos: number } | undefined;
  if (!occurred) return undefined;
  return new Date(Number(occurred.seconds) * 1000 + occurred.nanos / 1e6).toISOString();
}

describe("error-tracker fixtures", () => {
  it("issue alert (integration platform): numeric project gives no service", () => {
    const body = fixture("sentry/event-alert-triggered.json");
    expect(errorTracker.recognize(body)).toBe(true);
    const alert = alertOf(body);
    expect(alert).toMatchObject({
      source: "error-tracker",
      attachIdentity: "",
      eventId: "c5d2b1a0f3e44c6b9a8d7e6f5a4b3c2d",
      kind: "alert",
      title: "ConnectionError: could not connect to payments-db:5432",
      severity: "sev2",
      summary: "ConnectionError: could not connect to payments-db:5432 (culprit: checkout.payments.charge in submit_payment)",
      link: "https://sentry.io/organizations/acme/issues/5123498765/events/c5d2b1a0f3e44c6b9a8d7e6f5a4b3c2d/",
      alertRef: "5123498765",
    });
    expect(alert.entity).toBeUndefined();
    expect(isoOf(alert)).toBe("2024-06-12T10:05:12.348Z");
    expect(alert.data).toMatchObject({ triggered_rule: "Checkout API - new errors in production", action: "triggered" });
  });

  it("legacy plugin: project_slug is the service", () => {
    const body = fixture("sentry/legacy-webhooks-plugin.json");
    expect(errorTracker.recognize(body)).toBe(true);
    const alert = alertOf(body);
    expect(alert).toMatchObject({
      source: "error-tracker",
      attachIdentity: "",
      eventId: "c5d2b1a0f3e44c6b9a8d7e6f5a4b3c2d",
      kind: "alert",
      title: "ConnectionError: could not connect to payments-db:5432",
      severity: "sev2",
      entity: { kind: "service", id: "checkout-api" },
      link: "https://acme.sentry.io/issues/5123498765/?referrer=webhooks_plugin",
      alertRef: "5123498765",
    });
    expect(alert.summary).toContain("checkout.payments.charge in submit_payment");
    expect(isoOf(alert)).toBe("2024-06-12T10:05:12.348Z");
  });

  it("every delivery opens its own incident: no attach identity, even for the same event", () => {
    const body = fixture("sentry/event-alert-triggered.json");
    expect(alertOf(body).attachIdentity).toBe("");
    expect(alertOf(body).attachIdentity).toBe("");
  });
});

describe("error-tracker recognition", () => {
  it.each<[string, unknown, boolean]>([
    ["event_id with issue_id", { data: { event: { event_id: "e", issue_id: "1" } } }, true],
    ["event_id with numeric issue_id", { data: { event: { event_id: "e", issue_id: 1 } } }, true],
    ["event_id with issue_url", { data: { event: { event_id: "e", issue_url: "https://x/1" } } }, true],
    ["event_id alone", { data: { event: { event_id: "e" } } }, false],
    ["issue_id without event_id", { data: { event: { issue_id: "1" } } }, false],
    ["blank event_id", { data: { event: { event_id: " ", issue_id: "1" } } }, false],
    ["event not nested in data", { event: { event_id: "e", issue_id: "1" } }, false],
    ["legacy: project_slug beside event.event_id", { project_slug: "api", event: { event_id: "e" } }, true],
    ["legacy: project_slug beside event.id", { project_slug: "api", event: { id: "e" } }, true],
    ["legacy: project_slug without event", { project_slug: "api", message: "boom" }, false],
    ["legacy: event id not nested", { project_slug: "api", event_id: "e" }, false],
    ["legacy: numeric project_slug", { project_slug: 5, event: { event_id: "e" } }, false],
    ["data is an array", { data: [{ event: { event_id: "e", issue_id: "1" } }] }, false],
    ["null", null, false],
  ])("%s → %s", (_name, body, expected) => {
    expect(errorTracker.recognize(body)).toBe(expected);
  });
});

describe("error-tracker title preference: title, message, culprit, generic", () => {
  it.each<[Record<string, unknown>, string]>([
    [{ title: "T", message: "M", culprit: "C" }, "T"],
    [{ message: "M", culprit: "C" }, "M"],
    [{ title: "", message: "M", culprit: "C" }, "M"],
    [{ title: "  ", message: "", culprit: "C" }, "C"],
    [{ culprit: "C" }, "C"],
    [{}, errorTracker.DEFAULT_TITLE],
    [{ title: 5, message: null }, errorTracker.DEFAULT_TITLE],
  ])("%j → %s", (event, title) => {
    expect(alertOf(issueAlert(event)).title).toBe(title);
  });

  it("the legacy plugin reads its top-level message and culprit", () => {
    expect(alertOf({ project_slug: "api", message: "M", culprit: "C", event: { id: "e" } }).title).toBe("M");
    expect(alertOf({ project_slug: "api", culprit: "C", event: { id: "e" } }).title).toBe("C");
    expect(alertOf({ project_slug: "api", event: { id: "e" } }).title).toBe(errorTracker.DEFAULT_TITLE);
  });

  it("the generic title names an error issue", () => {
    expect(errorTracker.DEFAULT_TITLE).toMatch(/error issue/i);
  });
});

describe("error-tracker level → severity", () => {
  it.each<[unknown, string]>([
    ["fatal", "sev1"],
    ["FATAL", "sev1"],
    ["error", "sev2"],
    ["warning", "sev3"],
    ["info", "sev3"],
    ["debug", "sev3"],
    [undefined, "sev3"],
    [3, "sev3"],
  ])("%j → %s", (level, severity) => {
    expect(alertOf(issueAlert({ level })).severity).toBe(severity);
    expect(alertOf({ project_slug: "api", level, event: { id: "e" } }).severity).toBe(severity);
  });
});

describe("error-tracker other fields", () => {
  it("fractional epoch seconds become occurredAt", () => {
    const alert = alertOf(issueAlert({ timestamp: 1718186712.348 }));
    expect(alert.occurredAt).toMatchObject({ seconds: 1718186712n, nanos: 348_000_000 });
  });

  it("whole epoch seconds work too, and datetime stands in when timestamp is missing", () => {
    expect(isoOf(alertOf(issueAlert({ timestamp: 1718186712 })))).toBe("2024-06-12T10:05:12.000Z");
    expect(isoOf(alertOf(issueAlert({ datetime: "2024-06-12T10:05:12.348000Z" })))).toBe("2024-06-12T10:05:12.348Z");
    expect(alertOf(issueAlert({ timestamp: "soon" })).occurredAt).toBeUndefined();
  });

  it("a numeric project gives no entity and none is guessed", () => {
    expect(alertOf(issueAlert({ project: 4504123456789504, title: "x" })).entity).toBeUndefined();
  });

  it("project_slug gives the service when the payload carries one", () => {
    expect(alertOf(issueAlert({ project: 1 }, { project_slug: "checkout" })).entity).toEqual({ kind: "service", id: "checkout" });
  });

  it("culprit is added to the summary line", () => {
    expect(alertOf(issueAlert({ title: "KeyError", culprit: "app.views in get" })).summary).toBe("KeyError (culprit: app.views in get)");
    expect(alertOf(issueAlert({ title: "KeyError" })).summary).toBe("KeyError");
    expect(alertOf(issueAlert({ culprit: "app.views in get" })).summary).toBe("app.views in get");
  });

  it("the issue page is the link, the issue API URL only when there is none", () => {
    expect(alertOf(issueAlert({ web_url: "https://errors.example.com/i/1", issue_url: "https://errors.example.com/api/1" })).link).toBe(
      "https://errors.example.com/i/1",
    );
    expect(alertOf(issueAlert({ issue_url: "https://errors.example.com/api/1" })).link).toBe("https://errors.example.com/api/1");
  });

  it("action, triggered_rule, actor and installation are accepted", () => {
    const body = {
      action: "resolved",
      actor: { id: "x", type: "user" },
      installation: { uuid: "u-1" },
      data: { event: { event_id: "e", issue_id: "1", title: "x" }, triggered_rule: "rule-1" },
    };
    const alert = alertOf(body);
    // `action` is not used for mapping: even "resolved" opens, never resolves.
    expect(alert.kind).toBe("alert");
    expect(alert.data).toMatchObject({ action: "resolved", triggered_rule: "rule-1", installation: "u-1" });
  });

  it("map refuses a body it does not recognize with a PayloadError", () => {
    expect(() => errorTracker.map({ data: {} }, context)).toThrow(PayloadError);
  });
});
