import { describe, expect, it } from "vitest";
import { retryKeyOf } from "./retry-keys.js";
import { stableDigest } from "./retry-recognition.js";
import type { MappedDelivery } from "./sources/index.js";

const alert = (source: string, eventId = ""): MappedDelivery => ({ alert: { source, eventId } });

describe("retry keys", () => {
  it("a digest does not depend on key order, and tells form bodies apart", () => {
    expect(stableDigest({ a: 1, b: [1, { c: 2, d: 3 }] })).toBe(stableDigest({ b: [1, { d: 3, c: 2 }], a: 1 }));
    expect(stableDigest(new URLSearchParams("channel_id=C1&message_id=1"))).not.toBe(stableDigest(new URLSearchParams("channel_id=C1&message_id=2")));
    expect(stableDigest(new URLSearchParams("a=1"))).not.toBe(stableDigest({ a: "1" }));
  });

  it("Idempotency-Key wins on every route, scoped by route", () => {
    const h = new Headers({ "idempotency-key": "k-1" });
    expect(retryKeyOf("shared", { x: 1 }, alert("metrics-monitor", "e"), h)).toBe(retryKeyOf("shared", { y: 2 }, alert("cloud-monitor", "f"), h));
    expect(retryKeyOf("shared", {}, alert("metrics-monitor", "e"), h)).not.toBe(retryKeyOf("chat", {}, alert("chat"), h));
  });

  it("error-tracker: event id with the Request-ID header", () => {
    const body = { data: { event: { event_id: "e1" } } };
    const a = retryKeyOf("shared", body, alert("error-tracker", "e1"), new Headers({ "request-id": "r1" }));
    expect(retryKeyOf("shared", { ...body, other: 1 }, alert("error-tracker", "e1"), new Headers({ "request-id": "r1" }))).toBe(a);
    expect(retryKeyOf("shared", body, alert("error-tracker", "e1"), new Headers({ "request-id": "r2" }))).not.toBe(a);
    expect(retryKeyOf("shared", body, alert("error-tracker", "e2"), new Headers({ "request-id": "r1" }))).not.toBe(a);
  });

  it("sources whose event id the incident core holds need no key", () => {
    expect(retryKeyOf("shared", { event_id: "1" }, alert("metrics-monitor", "1"), new Headers())).toBeUndefined();
    // A chat message or an alert-router notification delivered again is a repeat the core records.
    expect(retryKeyOf("chat", { message_id: "1" }, alert("chat"), new Headers())).toBeUndefined();
    expect(retryKeyOf("alertrouter", { groupKey: "g", status: "firing", alerts: [] }, alert("alert-router"), new Headers())).toBeUndefined();
    expect(retryKeyOf("pagerduty", { dedup_key: "d" }, alert("pagerduty-events"), new Headers())).toBeUndefined();
  });
});
