import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { PayloadError } from "./payload-error.js";
import * as metricsMonitor from "./metrics-monitor.js";
import type { AlertInit } from "./types.js";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const fixture = (name: string): Record<string, unknown> => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8")) as Record<string, unknown>;
const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };

function alertOf(body: unknown): AlertInit {
  const delivery = metricsMonitor.map(body, context);
  if (!delivery.alert) throw new Error(`expected an alert, got ${JSON.stringify(delivery)}`);
  return delivery.alert;
}

const base = { alert_type: "error", alert_id: "42", event_id: "e-1", title: "High CPU" };

describe("metrics-monitor fixtures", () => {
  it.each([
    ["datadog/custom-body-triggered.json", "alert", "7612983743229480395", "2024-06-12T10:05:12.000Z"],
    ["datadog/custom-body-recovered.json", "recovery", "7612998540113382711", "2024-06-12T10:20:12.000Z"],
    ["datadog/custom-body-no-data.json", "no_data", "7613011462258811904", "2024-06-12T10:35:12.000Z"],
  ])("%s maps to kind %s", (file, kind, eventId, occurredAt) => {
    const body = fixture(file);
    expect(metricsMonitor.recognize(body)).toBe(true);
    const alert = alertOf(body);
    expect(alert).toMatchObject({
      source: "metrics-monitor",
      attachIdentity: "metrics-monitor:alert:81234567",
      eventId,
      kind,
      title: body.title,
      // `priority` holds the event priority ("normal"); the monitor's P2 is in `alert_priority`.
      severity: "sev2",
      summary: body.body,
      link: body.link,
      alertRef: "81234567",
    });
    // The fixtures send `tags` as a comma-separated string, which is not read as tags.
    expect(alert.entity).toBeUndefined();
    expect(alert.data).toMatchObject({ tags: body.tags, alert_priority: "P2", priority: "normal" });
    const occurred = alert.occurredAt as { seconds: bigint; nanos: number };
    expect(new Date(Number(occurred.seconds) * 1000).toISOString()).toBe(occurredAt);
  });
});

describe("metrics-monitor recognition", () => {
  it.each<[string, unknown, boolean]>([
    ["string alert_type", { alert_type: "error" }, true],
    ["empty string alert_type", { alert_type: "" }, true],
    ["array tags", { tags: [] }, true],
    ["array tags without alert_type", { tags: ["service:a"], title: "x" }, true],
    ["numeric alert_type", { alert_type: 5 }, false],
    ["comma-separated tags only", { tags: "service:a,env:prod" }, false],
    ["empty object", {}, false],
    ["null", null, false],
    ["array", [{ alert_type: "error" }], false],
    ["string", "alert_type", false],
    ["alert_type only through __proto__", JSON.parse('{"__proto__": {"alert_type": "error"}}'), false],
  ])("%s → %s", (_name, body, expected) => {
    expect(metricsMonitor.recognize(body)).toBe(expected);
  });
});

describe("metrics-monitor severity: priority wins over alert_type", () => {
  it.each<[Record<string, unknown>, string]>([
    [{ priority: "P1" }, "sev1"],
    [{ priority: "P2" }, "sev2"],
    [{ priority: "P3" }, "sev3"],
    [{ priority: "P4" }, "sev4"],
    [{ priority: "P5" }, "sev4"],
    [{ priority: "P3", alert_type: "error" }, "sev3"],
    [{ priority: "P1", alert_type: "info" }, "sev1"],
    [{ priority: "p1" }, "sev1"],
    [{ priority: " P2 " }, "sev2"],
    [{ alert_type: "error" }, "sev2"],
    [{ alert_type: "ERROR" }, "sev2"],
    [{ alert_type: "warning" }, "sev3"],
    [{ alert_type: "success" }, "sev3"],
    [{ alert_type: "info" }, "sev3"],
    [{ tags: [] }, "sev3"],
    // The monitor's template variables: $PRIORITY is the event priority, $ALERT_PRIORITY the P-value.
    [{ priority: "normal", alert_priority: "P1", alert_type: "warning" }, "sev1"],
    [{ priority: "low", alert_priority: "P4", alert_type: "error" }, "sev4"],
    [{ priority: "normal", alert_type: "error" }, "sev2"],
    [{ priority: "low", alert_type: "warning" }, "sev3"],
    [{ alert_priority: "P5", alert_type: "error" }, "sev4"],
    // A P-value in the spec's own field wins over alert_priority.
    [{ priority: "P4", alert_priority: "P1" }, "sev4"],
    [{ priority: "P6", alert_type: "error" }, "sev2"],
    [{ priority: 1, alert_type: "error" }, "sev2"],
  ])("%j → %s", (fields, severity) => {
    expect(alertOf({ alert_type: "warning", ...fields }).severity).toBe(severity);
  });
});

describe("metrics-monitor alert_transition", () => {
  it.each<[Record<string, unknown>, string]>([
    [{ alert_transition: "Triggered" }, "alert"],
    [{ alert_transition: "Re-Triggered" }, "alert"],
    [{ alert_transition: "Warn" }, "alert"],
    [{ alert_transition: "Re-Warn" }, "alert"],
    [{ alert_transition: "Renotify" }, "alert"],
    [{ alert_transition: "Recovered" }, "recovery"],
    [{ alert_transition: "No Data" }, "no_data"],
    [{ alert_transition: "Re-No Data" }, "no_data"],
    [{ alert_transition: "recovered" }, "recovery"],
    [{ alert_transition: "Something New" }, "alert"],
    // The transition decides even when alert_type says otherwise.
    [{ alert_transition: "Triggered", alert_type: "success" }, "alert"],
    [{ alert_transition: "Recovered", alert_type: "error" }, "recovery"],
    // Legacy payloads without alert_transition.
    [{ alert_type: "success" }, "recovery"],
    [{ alert_type: "info" }, "no_data"],
    [{ alert_type: "error" }, "alert"],
    [{ alert_type: "warning" }, "alert"],
    [{ alert_transition: "", alert_type: "success" }, "recovery"],
    [{ alert_transition: "Null", alert_type: "info" }, "no_data"],
    [{ alert_transition: null, alert_type: "success" }, "recovery"],
    [{ tags: ["a:b"] }, "alert"],
  ])("%j → %s", (fields, kind) => {
    expect(alertOf({ title: "t", ...fields }).kind).toBe(kind);
  });
});

describe("metrics-monitor title", () => {
  it.each<[unknown, string]>([
    ["Disk full", "Disk full"],
    ["  Disk full  ", "Disk full"],
    [undefined, metricsMonitor.DEFAULT_TITLE],
    ["", metricsMonitor.DEFAULT_TITLE],
    ["   ", metricsMonitor.DEFAULT_TITLE],
    [17, metricsMonitor.DEFAULT_TITLE],
    [null, metricsMonitor.DEFAULT_TITLE],
  ])("%j → %s", (title, expected) => {
    expect(alertOf({ alert_type: "error", title }).title).toBe(expected);
  });

  it("the generic title is a metrics alert title", () => {
    expect(metricsMonitor.DEFAULT_TITLE).toMatch(/metrics alert/i);
  });
});

describe("metrics-monitor tags and entity", () => {
  it.each<[string, unknown, { kind: string; id: string } | undefined]>([
    ["service tag", ["env:prod", "service:checkout"], { kind: "service", id: "checkout" }],
    ["empty entry skipped", ["", "service:api"], { kind: "service", id: "api" }],
    ["blank entries skipped", ["   ", "service:api"], { kind: "service", id: "api" }],
    ["non-string entries skipped", [42, null, { service: "x" }, "service:billing"], { kind: "service", id: "billing" }],
    ["first service tag wins", ["service:a", "service:b"], { kind: "service", id: "a" }],
    ["empty service name", ["service:"], undefined],
    ["no service tag", ["env:prod", "team:payments"], undefined],
    ["service as a bare word", ["service"], undefined],
    ["comma-separated string is not tags", "service:checkout,env:prod", undefined],
    ["empty array", [], undefined],
  ])("%s", (_name, tags, entity) => {
    expect(alertOf({ alert_type: "error", tags }).entity).toEqual(entity);
  });
});

describe("metrics-monitor attach identity", () => {
  it("alert_id is the identity, whatever the title and tags", () => {
    const a = alertOf({ ...base, title: "[Triggered] High CPU", tags: ["a:1"] });
    const b = alertOf({ ...base, title: "something else", tags: ["b:2"] });
    expect(a.attachIdentity).toBe("metrics-monitor:alert:42");
    expect(b.attachIdentity).toBe(a.attachIdentity);
  });

  it("a numeric alert_id (unquoted template variable) is read as text", () => {
    expect(alertOf({ alert_type: "error", alert_id: 81234567 }).attachIdentity).toBe("metrics-monitor:alert:81234567");
  });

  it("without alert_id, title plus sorted tags", () => {
    const alert = alertOf({ alert_type: "error", title: "High CPU", tags: ["service:x", "env:prod", "", "env:prod"] });
    expect(alert.attachIdentity).toBe("metrics-monitor:title:High CPU|env:prod,service:x");
  });

  it("tag order does not matter", () => {
    const a = alertOf({ alert_type: "error", title: "High CPU", tags: ["b:2", "a:1", "c:3"] });
    const b = alertOf({ alert_type: "error", title: "High CPU", tags: ["c:3", "b:2", "a:1"] });
    expect(a.attachIdentity).toBe(b.attachIdentity);
  });

  it("different tags are different alerts", () => {
    const a = alertOf({ alert_type: "error", title: "High CPU", tags: ["host:a"] });
    const b = alertOf({ alert_type: "error", title: "High CPU", tags: ["host:b"] });
    expect(a.attachIdentity).not.toBe(b.attachIdentity);
  });

  it("a comma-separated tags string contributes no tags", () => {
    const alert = alertOf({ alert_type: "error", title: "High CPU", tags: "host:a,env:prod" });
    expect(alert.attachIdentity).toBe("metrics-monitor:title:High CPU|");
  });

  it("a recovery finds the room its trigger opened although the title carries the transition", () => {
    const trigger = alertOf({ alert_transition: "Triggered", title: "[Triggered on {host:a}] High CPU", tags: ["host:a"] });
    const recovery = alertOf({ alert_transition: "Recovered", title: "[Recovered on {host:a}] High CPU", tags: ["host:a"] });
    const noData = alertOf({ alert_transition: "No Data", title: "[No Data on {host:a}] High CPU", tags: ["host:a"] });
    expect(trigger.attachIdentity).toBe("metrics-monitor:title:[on {host:a}] High CPU|host:a");
    expect(recovery.attachIdentity).toBe(trigger.attachIdentity);
    expect(noData.attachIdentity).toBe(trigger.attachIdentity);
    // The incident title itself is kept as sent.
    expect(trigger.title).toBe("[Triggered on {host:a}] High CPU");
  });

  it.each([
    ["[P1] [Triggered] High CPU", "High CPU"],
    ["[Re-Triggered] High CPU", "High CPU"],
    ["[Warn on {host:b}] High CPU", "[on {host:b}] High CPU"],
    ["[Re-No Data on {host:b}] High CPU", "[on {host:b}] High CPU"],
    ["[Triggeredness] High CPU", "[Triggeredness] High CPU"],
    ["High CPU [Triggered]", "High CPU [Triggered]"],
    ["[Triggered on {host:b} High CPU", "[Triggered on {host:b} High CPU"],
  ])("identity title of %j is %j", (title, expected) => {
    expect(metricsMonitor.identityTitle(title)).toBe(expected);
  });

  it("scopes keep the hosts of one multi-alert apart", () => {
    const a = alertOf({ alert_type: "error", title: "[Triggered on {host:a}] High CPU" });
    const b = alertOf({ alert_type: "error", title: "[Triggered on {host:b}] High CPU" });
    expect(a.attachIdentity).not.toBe(b.attachIdentity);
  });

  it("without alert_id or title the generic title stands in", () => {
    expect(alertOf({ tags: ["service:x"] }).attachIdentity).toBe(`metrics-monitor:title:${metricsMonitor.DEFAULT_TITLE}|service:x`);
  });
});

describe("metrics-monitor other fields", () => {
  it("event_id identifies the notification", () => {
    expect(alertOf({ ...base, event_id: "7612983743229480395" }).eventId).toBe("7612983743229480395");
    expect(alertOf({ ...base, event_id: 12345 }).eventId).toBe("12345");
    expect(alertOf({ alert_type: "error" }).eventId).toBe("");
  });

  it("body becomes the summary and link is kept", () => {
    const alert = alertOf({ ...base, body: "CPU above 90%", link: "https://monitor.example.com/event/1" });
    expect(alert.summary).toBe("CPU above 90%");
    expect(alert.link).toBe("https://monitor.example.com/event/1");
    expect(alert.alertRef).toBe("42");
  });

  it.each(["javascript:alert(1)", "not a url", "ftp://files.example.com/x", 7])("link %j is not kept", (link) => {
    expect(alertOf({ ...base, link }).link).toBeUndefined();
  });

  it("no body gives no summary", () => {
    expect(alertOf(base).summary).toBeUndefined();
  });

  it.each<[unknown, string | undefined]>([
    ["1718186712000", "2024-06-12T10:05:12.000Z"],
    [1718186712000, "2024-06-12T10:05:12.000Z"],
    ["1718186712", "2024-06-12T10:05:12.000Z"],
    ["yesterday", undefined],
    [-5, undefined],
    [undefined, undefined],
  ])("date %j → occurredAt %s", (date, expected) => {
    const occurred = alertOf({ ...base, date }).occurredAt as { seconds: bigint } | undefined;
    expect(occurred === undefined ? undefined : new Date(Number(occurred.seconds) * 1000).toISOString()).toBe(expected);
  });

  it("a body that is not an object is refused with a PayloadError", () => {
    expect(() => metricsMonitor.map(["alert_type"], context)).toThrow(PayloadError);
  });
});
