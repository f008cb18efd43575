import { describe, expect, it } from "vitest";
import { PayloadError } from "./payload-error.js";
import * as remote from "./remote.js";
import type { AlertInit } from "./types.js";

const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };
const minimal = { serviceSource: "remote", connectionId: "conn-1", title: "Queue backlog", severity: "sev2" };

function alertOf(body: unknown): AlertInit {
  const delivery = remote.map(body, context);
  if (!delivery.alert) throw new Error(`expected an alert, got ${JSON.stringify(delivery)}`);
  return delivery.alert;
}

function refusal(body: unknown): PayloadError {
  try {
    remote.map(body, context);
  } catch (error) {
    if (error instanceof PayloadError) return error;
    throw error;
  }
  throw new Error("expected a PayloadError");
}

describe("remote recognition", () => {
  it.each<[unknown, boolean]>([
    [minimal, true],
    [{ serviceSource: "remote" }, true],
    [{ serviceSource: "Remote" }, false],
    [{ serviceSource: "metrics-monitor" }, false],
    [{ connectionId: "c", title: "t", severity: "sev1" }, false],
    [JSON.parse('{"__proto__": {"serviceSource": "remote"}}'), false],
    [null, false],
    [["remote"], false],
  ])("%j → %s", (body, expected) => {
    expect(remote.recognize(body)).toBe(expected);
  });
});

describe("remote mapping", () => {
  it("maps every field", () => {
    const alert = alertOf({
      ...minimal,
      occurredAt: "2024-06-12T10:05:12.5+02:00",
      entityHints: ["service:checkout", "host:web-01"],
      dedupKey: "backlog/orders",
      summary: "orders queue above 10k",
      url: "https://telemetry.example.com/alerts/9",
      kind: "trigger",
    });
    expect(alert).toEqual({
      source: "remote",
      attachIdentity: "remote:conn-1:backlog/orders",
      eventId: expect.stringMatching(/^[0-9a-f]{64}$/),
      kind: "alert",
      title: "Queue backlog",
      severity: "sev2",
      entity: { kind: "service", id: "checkout" },
      summary: "orders queue above 10k",
      link: "https://telemetry.example.com/alerts/9",
      alertRef: "backlog/orders",
      occurredAt: expect.objectContaining({ seconds: 1718179512n, nanos: 500_000_000 }),
      data: {
        connectionId: "conn-1",
        dedupKey: "backlog/orders",
        kind: "trigger",
        entityHints: ["service:checkout", "host:web-01"],
      },
    });
  });

  it("the minimal payload needs only the four required fields", () => {
    const alert = alertOf(minimal);
    expect(alert).toMatchObject({ kind: "alert", eventId: "", attachIdentity: "remote:conn-1:title:Queue backlog" });
    expect(alert.entity).toBeUndefined();
    expect(alert.occurredAt).toBeUndefined();
  });

  it.each(["sev1", "sev2", "sev3", "sev4"])("severity %s is taken as sent", (severity) => {
    expect(alertOf({ ...minimal, severity }).severity).toBe(severity);
  });

  it("kind recovery is a recovery on the same identity as its trigger", () => {
    const trigger = alertOf({ ...minimal, dedupKey: "k1", kind: "trigger" });
    const recovery = alertOf({ ...minimal, dedupKey: "k1", kind: "recovery" });
    expect(recovery.kind).toBe("recovery");
    expect(recovery.attachIdentity).toBe(trigger.attachIdentity);
  });

  it("each connection has its own identity for the same dedupKey", () => {
    const a = alertOf({ ...minimal, connectionId: "conn-a", dedupKey: "k1" });
    const b = alertOf({ ...minimal, connectionId: "conn-b", dedupKey: "k1" });
    expect(a.attachIdentity).not.toBe(b.attachIdentity);
  });

  it("without dedupKey, the connection and the title identify the alert", () => {
    expect(alertOf({ ...minimal, title: "Disk full" }).attachIdentity).toBe("remote:conn-1:title:Disk full");
    expect(alertOf({ ...minimal, title: "Disk full", kind: "recovery" }).attachIdentity).toBe("remote:conn-1:title:Disk full");
  });

  it("a redelivery carries the same event id; another notification of the alert does not", () => {
    const at = { ...minimal, dedupKey: "k1", occurredAt: "2024-06-12T10:05:12Z" };
    expect(alertOf(at).eventId).toBe(alertOf({ ...at }).eventId);
    expect(alertOf({ ...at, occurredAt: "2024-06-12T10:06:12Z" }).eventId).not.toBe(alertOf(at).eventId);
    expect(alertOf({ ...at, kind: "recovery" }).eventId).not.toBe(alertOf(at).eventId);
    // Two spellings of one instant are one notification.
    expect(alertOf({ ...at, occurredAt: "2024-06-12T12:05:12+02:00" }).eventId).toBe(alertOf(at).eventId);
  });

  it("entity hints split at the first colon", () => {
    expect(alertOf({ ...minimal, entityHints: ["url:https://shop.example.com/cart"] }).entity).toEqual({
      kind: "url",
      id: "https://shop.example.com/cart",
    });
    expect(alertOf({ ...minimal, entityHints: [] }).entity).toBeUndefined();
  });

  it("the summary may be absent or blank", () => {
    expect(alertOf({ ...minimal, summary: "  " }).summary).toBeUndefined();
  });
});

describe("remote refusals name the field", () => {
  it.each<[string, Record<string, unknown>, string, string]>([
    ["connectionId missing", { ...minimal, connectionId: undefined }, "connectionId", "connectionId is required"],
    ["connectionId empty", { ...minimal, connectionId: "  " }, "connectionId", "connectionId must not be empty"],
    ["connectionId a number", { ...minimal, connectionId: 7 }, "connectionId", "connectionId must be a string"],
    ["title missing", { ...minimal, title: undefined }, "title", "title is required"],
    ["title empty", { ...minimal, title: "" }, "title", "title must not be empty"],
    ["title null", { ...minimal, title: null }, "title", "title must be a string"],
    ["severity missing", { ...minimal, severity: undefined }, "severity", "severity is required"],
    ["severity invalid", { ...minimal, severity: "critical" }, "severity", "severity must be one of sev1, sev2, sev3, sev4"],
    ["severity upper case", { ...minimal, severity: "SEV1" }, "severity", "severity must be one of sev1, sev2, sev3, sev4"],
    ["severity sev5", { ...minimal, severity: "sev5" }, "severity", "severity must be one of sev1, sev2, sev3, sev4"],
    ["severity a number", { ...minimal, severity: 1 }, "severity", "severity must be one of sev1, sev2, sev3, sev4"],
    ["occurredAt not RFC 3339", { ...minimal, occurredAt: "12/06/2024" }, "occurredAt", "occurredAt must be an RFC 3339 timestamp"],
    ["occurredAt without offset", { ...minimal, occurredAt: "2024-06-12T10:05:12" }, "occurredAt", "occurredAt must be an RFC 3339 timestamp"],
    ["occurredAt impossible date", { ...minimal, occurredAt: "2024-02-30T10:05:12Z" }, "occurredAt", "occurredAt must be an RFC 3339 timestamp"],
    ["occurredAt a number", { ...minimal, occurredAt: 1718186712 }, "occurredAt", "occurredAt must be a string"],
    ["entityHints not an array", { ...minimal, entityHints: "service:a" }, "entityHints", "entityHints must be an array of kind:value strings"],
    ["entityHints entry not a string", { ...minimal, entityHints: [5] }, "entityHints[0]", "entityHints entries must be kind:value strings"],
    ["entityHints entry without colon", { ...minimal, entityHints: ["service:a", "checkout"] }, "entityHints[1]", "entityHints[1] must be kind:value"],
    ["entityHints entry without kind", { ...minimal, entityHints: [":checkout"] }, "entityHints[0]", "entityHints[0] must be kind:value"],
    ["entityHints entry without value", { ...minimal, entityHints: ["service:"] }, "entityHints[0]", "entityHints[0] must be kind:value"],
    ["dedupKey not a string", { ...minimal, dedupKey: 5 }, "dedupKey", "dedupKey must be a string"],
    ["url not a URL", { ...minimal, url: "telemetry" }, "url", "url must be an http or https URL"],
    ["url with another scheme", { ...minimal, url: "javascript:alert(1)" }, "url", "url must be an http or https URL"],
    ["kind unknown", { ...minimal, kind: "resolve" }, "kind", "kind must be trigger or recovery"],
    ["summary not a string", { ...minimal, summary: { text: "x" } }, "summary", "summary must be a string"],
  ])("%s", (_name, body, field, message) => {
    const error = refusal(body);
    expect(error.field).toBe(field);
    expect(error.message).toBe(message);
    expect(error.message).toContain(field.replace(/\[\d+\]$/, ""));
  });

  it("required fields are reported in the spec's order", () => {
    expect(refusal({ serviceSource: "remote" }).field).toBe("connectionId");
    expect(refusal({ serviceSource: "remote", connectionId: "c" }).field).toBe("title");
    expect(refusal({ serviceSource: "remote", connectionId: "c", title: "t" }).field).toBe("severity");
  });

  it("a body that is not an object is refused", () => {
    expect(refusal([minimal]).field).toBe("body");
    expect(refusal("remote").field).toBe("body");
  });
});
