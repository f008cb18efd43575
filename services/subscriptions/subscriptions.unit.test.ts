import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { Webhook } from "standardwebhooks";
import {
  HeartbeatSilentSchema,
  IncidentOpenedSchema,
  IncidentResolvedSchema,
  IncidentUnacknowledgedSchema,
  TimelineRecordedSchema,
  UpdateSentSchema,
} from "../../gen/warroom/events/v1/events_pb.js";
import {
  EVENT_TYPES,
  envelope,
  fromHeartbeatSilent,
  fromIncidentOpened,
  fromIncidentResolved,
  fromIncidentUnacknowledged,
  fromTimelineRecorded,
  fromUpdateSent,
} from "./event-types.js";
import { nextRetryDelayMs, parseRetryAfter } from "./retry-schedule.js";
import { newSigningSecret, signDelivery } from "./signing.js";

const URL = "https://warroom.example.test";
const at = new Date("2026-11-26T10:00:00.000Z");
const org = "11111111-1111-4111-8111-111111111111";
const incident = "22222222-2222-4222-8222-222222222222";

describe("event types: which domain event becomes which webhook event", () => {
  const timeline = (kind: string) =>
    fromTimelineRecorded(URL, create(TimelineRecordedSchema, { orgId: org, incidentId: incident, kind, at: timestampFromDate(at) }));

  it("maps every documented type from a domain event", () => {
    const produced = new Set<string>([
      fromIncidentOpened(URL, create(IncidentOpenedSchema, { orgId: org, incidentId: incident })).type,
      fromIncidentUnacknowledged(URL, create(IncidentUnacknowledgedSchema, { orgId: org, incidentId: incident, step: 1, steps: 3, minutes: 5 })).type,
      ...["repeat", "recovery", "no_data", "severity_changed", "acknowledged", "owner_changed", "note", "resumed", "investigation"].map(
        (k) => timeline(k)!.type,
      ),
      fromIncidentResolved(URL, create(IncidentResolvedSchema, { orgId: org, incidentId: incident, state: "resolved" }))!.type,
      fromIncidentResolved(URL, create(IncidentResolvedSchema, { orgId: org, incidentId: incident, state: "archived" }))!.type,
      fromHeartbeatSilent(create(HeartbeatSilentSchema, { orgId: org, name: "nightly" })).type,
      fromUpdateSent(URL, create(UpdateSentSchema, { orgId: org, incidentId: incident, messageId: "m", state: "sent" })).type,
    ]);
    expect([...produced].sort()).toEqual([...EVENT_TYPES].sort());
  });

  it("offers a responder's acknowledgement, owner change and note as events of their own", () => {
    expect(timeline("acknowledged")!.type).toBe("incident.acknowledged");
    expect(timeline("owner_changed")!.type).toBe("incident.owner_changed");
    expect(timeline("note")!.type).toBe("incident.note_added");
    expect(timeline("note")!.data("acme")).toMatchObject({ org: "acme", incidentId: incident, kind: "note" });
  });

  it("offers no event for timeline kinds that have their own (opened, resolved, archived) or none (updates)", () => {
    for (const kind of ["opened", "resolved", "archived", "update_sent", "update_simulated"]) expect(timeline(kind)).toBeUndefined();
  });

  it("writes the payloads as the README documents them", () => {
    const opened = fromIncidentOpened(
      URL,
      create(IncidentOpenedSchema, {
        orgId: org,
        incidentId: incident,
        title: "Disk full",
        severity: "sev1",
        source: "cloud-monitor",
        at: timestampFromDate(at),
      }),
    );
    expect(JSON.parse(envelope(opened.type, opened.at, opened.data("acme")))).toEqual({
      type: "incident.opened",
      timestamp: "2026-11-26T10:00:00.000Z",
      data: {
        org: "acme",
        incidentId: incident,
        workspaceUrl: `${URL}/o/acme/incidents/${incident}`,
        kind: "opened",
        at: "2026-11-26T10:00:00Z",
        title: "Disk full",
        severity: "sev1",
        source: "cloud-monitor",
      },
    });
    expect(timeline("severity_changed")!.data("acme")).toEqual({
      org: "acme",
      incidentId: incident,
      workspaceUrl: `${URL}/o/acme/incidents/${incident}`,
      kind: "severity_changed",
      at: "2026-11-26T10:00:00Z",
    });
    expect(
      fromHeartbeatSilent(create(HeartbeatSilentSchema, { orgId: org, name: "nightly", silentSeconds: 3900n, at: timestampFromDate(at) })).data("acme"),
    ).toEqual({
      org: "acme",
      name: "nightly",
      silentSeconds: "3900",
      at: "2026-11-26T10:00:00Z",
    });
  });
});

describe("retry schedule", () => {
  const schedule = [5, 30, 120];

  it("waits the schedule's entry less up to 20 %, and gives up after the last", () => {
    expect(nextRetryDelayMs(schedule, 1, undefined, () => 1)).toBe(5000);
    expect(nextRetryDelayMs(schedule, 1, undefined, () => 0)).toBe(4000);
    expect(nextRetryDelayMs(schedule, 3, undefined, () => 0.5)).toBe(108_000);
    expect(nextRetryDelayMs(schedule, 4, undefined)).toBeUndefined();
  });

  it("honours a longer Retry-After, never a shorter one", () => {
    expect(nextRetryDelayMs(schedule, 1, 60_000, () => 1)).toBe(60_000);
    expect(nextRetryDelayMs(schedule, 2, 1000, () => 1)).toBe(30_000);
  });

  it("reads Retry-After as seconds or as an HTTP date", () => {
    expect(parseRetryAfter("120")).toBe(120_000);
    const now = Date.parse("2026-11-26T10:00:00Z");
    expect(parseRetryAfter("Thu, 26 Nov 2026 10:01:00 GMT", now)).toBe(60_000);
    expect(parseRetryAfter("soon")).toBeUndefined();
    expect(parseRetryAfter(undefined)).toBeUndefined();
  });
});

describe("signing", () => {
  it("signs so that a Standard Webhooks verifier holding either secret accepts it", () => {
    const [a, b] = [newSigningSecret(), newSigningSecret()];
    const body = '{"type":"incident.opened"}';
    const headers = signDelivery([a, b], "msg_1", new Date(), body);
    expect(new Webhook(a).verify(body, { ...headers })).toEqual({ type: "incident.opened" });
    expect(new Webhook(b).verify(body, { ...headers })).toEqual({ type: "incident.opened" });
    expect(() => new Webhook(newSigningSecret()).verify(body, { ...headers })).toThrow();
    expect(() => new Webhook(a).verify(`${body} `, { ...headers })).toThrow();
  });
});
