import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { mapChange, mapEvent, mapV1Event, PagerDutyEventError, routingKeyOf } from "./pagerduty-events.js";

const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const fixture = (name: string): any => JSON.parse(readFileSync(join(repoRoot, "test/fixtures/pagerduty", name), "utf8"));
const context = { receivedAt: new Date("2024-06-12T12:00:00Z"), newDedupKey: () => "generated0000000000000000000000a" };

function errorsOf(body: unknown, map: typeof mapEvent = mapEvent): readonly string[] {
  try {
    map(body, context);
  } catch (err) {
    if (err instanceof PagerDutyEventError) return err.errors;
    throw err;
  }
  throw new Error("expected a PagerDutyEventError");
}

describe("PagerDuty Events API v2 mapping", () => {
  it.each([
    ["events-v2-trigger-full.json", "trigger", "alert", "alertmanager/HighErrorRate/checkout/checkout-api", "sev1"],
    ["events-v2-trigger-minimal.json", "trigger", "alert", "generated0000000000000000000000a", "sev3"],
    ["events-v2-acknowledge.json", "acknowledge", "acknowledge", "alertmanager/HighErrorRate/checkout/checkout-api", "sev3"],
    ["events-v2-resolve.json", "resolve", "recovery", "alertmanager/HighErrorRate/checkout/checkout-api", "sev3"],
    ["alertmanager-0.25-trigger.json", "trigger", "alert", "0ea03eed1bc4593a508497c4f106b11ada2054c821fa60aecfbc860593ce7b61", "sev2"],
    ["alertmanager-0.25-resolve.json", "resolve", "recovery", "0ea03eed1bc4593a508497c4f106b11ada2054c821fa60aecfbc860593ce7b61", "sev2"],
  ])("%s: %s is a delivery of kind %s on its dedup key", (name, action, kind, dedupKey, severity) => {
    const mapped = mapEvent(fixture(name), context);
    expect(mapped.action).toBe(action);
    expect(mapped.dedupKey).toBe(dedupKey);
    expect(mapped.delivery.alert).toMatchObject({
      source: "pagerduty-events",
      kind,
      attachIdentity: `pagerduty-events:${dedupKey}`,
      eventId: "",
      alertRef: dedupKey,
    });
    if (kind === "alert") expect(mapped.delivery.alert.severity).toBe(severity);
  });

  it("maps every field of the full trigger", () => {
    const { delivery } = mapEvent(fixture("events-v2-trigger-full.json"), context);
    expect(delivery.alert).toMatchObject({
      title: "checkout-api 5xx ratio above 5% (7.3%) in prod",
      summary: "checkout-api 5xx ratio above 5% (7.3%) in prod",
      entity: { kind: "service", id: "checkout-api" },
      link: "https://runbooks.example.com/HighErrorRate",
      occurredAt: { seconds: 1718186537n, nanos: 513_000_000 },
    });
    expect(delivery.alert.data).toMatchObject({
      client: "Alert Intake",
      clientUrl: "https://intake.example.com/alerts/7b1c",
      payload: { group: "checkout", class: "http 5xx rate" },
    });
    expect(JSON.stringify(delivery.alert.data)).not.toContain("e93facc04764012d7bfb002500d5d1a6");
  });

  it("the hostile fixture maps without executable links or inherited keys", () => {
    const { delivery } = mapEvent(fixture("hostile-trigger.json"), context);
    expect(delivery.alert.link).toBeUndefined();
    expect(delivery.alert.occurredAt).toBeUndefined();
    expect(delivery.alert.title).not.toContain("\u0000");
    expect(delivery.alert.attachIdentity).not.toContain("\u0000");
  });

  it.each([
    [{ event_action: "trigger", payload: { source: "h", severity: "info" } }, ["'payload.summary' is missing or blank"]],
    [{ event_action: "trigger", payload: { summary: "s", severity: "info" } }, ["'payload.source' is missing or blank"]],
    [{ event_action: "trigger", payload: { summary: "s", source: "h" } }, ["'payload.severity' is missing or blank"]],
    [
      { event_action: "trigger", payload: { summary: 1, source: "h", severity: "info" } },
      ["'payload.summary' must be a string", "'payload.summary' is missing or blank"],
    ],
    [{ event_action: "trigger", payload: { summary: "s", source: "h", severity: "info" }, images: {} }, ["'images' must be an array"]],
    [{ event_action: "resolve", dedup_key: "x".repeat(255) }, []],
    [[], ["Event object must be a JSON object"]],
  ])("refuses %j with PagerDuty's list", (body, errors) => {
    if (errors.length === 0) expect(() => mapEvent(body, context)).not.toThrow();
    else expect(errorsOf(body)).toEqual(errors);
  });

  it("reads the routing key and change events", () => {
    expect(routingKeyOf({ routing_key: " abc " })).toBe("abc");
    expect(routingKeyOf({ routing_key: 5 })).toBeUndefined();
    const change = mapChange(fixture("change-event-full.json"), context);
    expect(change.alert).toMatchObject({
      kind: "change",
      title: "Deployed checkout-api v2.14.0 to prod",
      link: "https://ci.example.com/checkout-api/builds/4812",
    });
    expect(change.alert.eventId).toMatch(/^change:[0-9a-f]{64}$/);
    expect(mapChange(fixture("change-event-full.json"), context).alert.eventId).toBe(change.alert.eventId);
  });

  it("reads a v1 event as the v2 event it corresponds to, and refuses with v1's field names", () => {
    const trigger = mapV1Event(fixture("events-v1-trigger.json"), context);
    expect(trigger).toMatchObject({ action: "trigger", dedupKey: "srv01/HTTP" });
    expect(trigger.delivery.alert).toMatchObject({
      kind: "alert",
      title: "FAILURE for production/HTTP on machine srv01.acme.example.com",
      severity: "sev2",
      link: "https://monitoring.example.com/incidents/srv01-http",
      attachIdentity: "pagerduty-events:srv01/HTTP",
    });
    // One alert, one key, whichever version names it.
    const v2 = mapEvent({ event_action: "resolve", dedup_key: "srv01/HTTP" }, context);
    expect(mapV1Event(fixture("events-v1-resolve.json"), context).delivery.alert.attachIdentity).toBe(v2.delivery.alert.attachIdentity);
    expect(routingKeyOf({ service_key: " k " }, "service_key")).toBe("k");
    const v1Errors = (body: unknown) => errorsOf(body, mapV1Event);
    expect(v1Errors({ event_type: "trigger" })).toEqual(["'description' is missing or blank"]);
    expect(v1Errors({ event_type: "resolve" })).toEqual(["'incident_key' is missing or blank"]);
    expect(v1Errors({ event_type: "page", description: "d" })).toEqual(["'event_type' must be one of trigger, acknowledge, resolve"]);
    expect(v1Errors({ event_type: "trigger", description: "d", contexts: {} })).toEqual(["'contexts' must be an array"]);
    expect(() => mapV1Event({ event_type: "acknowledge", incident_key: "k" }, context)).not.toThrow();
  });
});
