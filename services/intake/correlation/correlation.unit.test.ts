import { describe, expect, it } from "vitest";
import { checkCorrelationSettings, compileCorrelationKey, CORRELATION_LIMITS, correlationKeyOf } from "./correlation.js";

const alert = {
  source: "alert-router",
  kind: "alert",
  title: "HighErrorRate",
  severity: "sev1",
  attachIdentity: 'alert-router:{}:{alertname="HighErrorRate"}',
  eventId: "",
  entity: { kind: "service", id: "checkout-api" },
  data: { labels: { team: "payments" } },
};

describe("correlation settings", () => {
  it("defaults the window, keeps the key, and refuses what it cannot use, naming the field", () => {
    expect(checkCorrelationSettings({ mode: "link" })).toEqual({ mode: "link", windowMinutes: CORRELATION_LIMITS.defaultWindowMinutes, key: "" });
    expect(checkCorrelationSettings({ mode: " attach ", windowMinutes: 5, key: " alert.entity.id " })).toEqual({
      mode: "attach",
      windowMinutes: 5,
      key: "alert.entity.id",
    });
    expect(() => checkCorrelationSettings({ mode: "merge" })).toThrow(/^mode: link/);
    expect(() => checkCorrelationSettings({ mode: "link", windowMinutes: CORRELATION_LIMITS.maxWindowMinutes + 1 })).toThrow(/windowMinutes: 1 to 10080/);
    expect(() => checkCorrelationSettings({ mode: "link", key: "body.service" }, "correlation.")).toThrow(/correlation\.key: unknown name "body"; use alert/);
    expect(() => checkCorrelationSettings({ mode: "link", key: "x".repeat(3000) })).toThrow(/key/);
  });
});

describe("the correlation key", () => {
  it("is the entity without an expression, and nothing without an entity", () => {
    expect(correlationKeyOf(undefined, alert)).toEqual({ key: "entity:service:checkout-api" });
    expect(correlationKeyOf(undefined, { ...alert, entity: undefined })).toEqual({ key: "" });
  });

  it("is the expression's value over the normalized alert; empty or null correlates nothing; a failure is an error", () => {
    expect(correlationKeyOf(compileCorrelationKey("alert.data.labels.team", "key"), alert)).toEqual({ key: "key:payments" });
    expect(correlationKeyOf(compileCorrelationKey('alert.source == "chat" ? alert.title : ""', "key"), alert)).toEqual({ key: "" });
    expect(correlationKeyOf(compileCorrelationKey("alert.data.labels.owner", "key"), alert)).toHaveProperty("error");
  });

  it("becomes a digest past its bound, the same for the same input", () => {
    const long = { ...alert, entity: { kind: "service", id: "s".repeat(500) } };
    const first = correlationKeyOf(undefined, long);
    expect(first).toEqual({ key: expect.stringMatching(/^sha256:\S+$/) });
    expect(correlationKeyOf(undefined, long)).toEqual(first);
  });
});
