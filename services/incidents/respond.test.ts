import { create, fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import type postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TimelineRecordedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { AlertSchema, IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, type TestApp } from "../../test/support/app.js";
import { OTHER, type Responders, startResponders } from "./testing/responders.js";
import { tapOutbox } from "../../test/support/outbox-tap.js";

/**
 * A responder's actions over every public surface: acknowledge, owner, notes (REST, Connect and
 * gRPC against the running service), and the list's filters, sorts and pages.
 */

let app: TestApp;
let internal: Client<typeof IncidentsService>;
let orgId: string;
let ownerToken: string;
let memberToken: string;
let memberId: string;
let ownerId: string;
let otherOrgToken: string;
let db: postgres.Sql;

let responders: Responders;

beforeAll(async () => {
  responders = await startResponders();
  ({ app, internal, orgId, ownerToken, memberId, memberToken, otherOrgToken, db } = responders);
  const members = await app.call("GET", `/o/${OWNER.org}/members`, { token: ownerToken });
  ownerId = members.body.members.find((m: { email: string }) => m.email === OWNER.email).id;
  await tapOutbox(db, "incidents");
});

afterAll(() => responders?.stop());

let sequence = 0;
type AlertInit = {
  attachIdentity?: string;
  eventId?: string;
  title?: string;
  severity?: string;
  source?: string;
  kind?: string;
  entity?: { kind: string; id: string };
};
async function deliver(init: AlertInit) {
  return internal.record({
    orgId,
    orgSlug: OWNER.org,
    alert: create(AlertSchema, { source: "metrics-monitor", kind: "alert", severity: "sev3", ...init }),
  });
}
async function open(init: AlertInit = {}) {
  const n = ++sequence;
  const res = await deliver({ attachIdentity: `respond:${n}`, eventId: `respond-${n}`, title: `Respond ${n}`, ...init });
  expect(res.outcome).toBe("opened");
  return res.incident!;
}

const path = (id: string, action = "") => `/o/${OWNER.org}/incidents/${id}${action ? `/${action}` : ""}`;
const timelineOf = async (id: string) => (await app.call("GET", path(id, "timeline"), { token: ownerToken })).body.entries as any[];

function publicClient(kind: "connect" | "grpc", token?: string): Client<typeof IncidentsService> {
  const bearer: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport =
    kind === "grpc"
      ? createGrpcTransport({ baseUrl: app.url, interceptors: [bearer] })
      : createConnectTransport({ baseUrl: app.url, httpVersion: "1.1", interceptors: [bearer] });
  return createClient(IncidentsService, transport);
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return "OK";
  } catch (err) {
    return Code[ConnectError.from(err).code];
  }
}

describe("acknowledge", () => {
  it("records who and when, on the timeline, audited and published; a later repeat keeps it", async () => {
    const incident = await open({ attachIdentity: "respond:ack-repeat" });
    const before = await app.call("GET", path(incident.id), { token: ownerToken });
    expect(before.body.acknowledgedAt).toBeNull();

    const acked = await app.call("POST", path(incident.id, "acknowledge"), { token: memberToken });
    expect(acked.status).toBe(200);
    expect(acked.body.state).toBe("open");
    expect(acked.body.acknowledgedBy).toBe("responder@acme.test");
    expect(Date.parse(acked.body.acknowledgedAt)).toBeGreaterThanOrEqual(Date.parse(acked.body.openedAt));
    const entry = acked.body.timeline.find((e: { kind: string }) => e.kind === "acknowledged");
    expect(entry).toMatchObject({ summary: "Acknowledged by responder@acme.test", data: { actor: "responder@acme.test" } });
    expect(entry.at).toBe(acked.body.acknowledgedAt);

    // The spec's attach rules are untouched: the repeat attaches to the same open incident.
    const repeat = await deliver({ attachIdentity: "respond:ack-repeat", eventId: "respond-ack-repeat-2", title: "again" });
    expect(repeat.outcome).toBe("attached");
    expect(repeat.incident!.id).toBe(incident.id);
    const after = await app.call("GET", path(incident.id), { token: ownerToken });
    expect(after.body).toMatchObject({ state: "open", acknowledgedBy: "responder@acme.test", acknowledgedAt: acked.body.acknowledgedAt, repeatCount: 1 });

    // A second acknowledgement, by anyone, answers it unchanged and records nothing.
    const again = await app.call("POST", path(incident.id, "acknowledge"), { token: ownerToken });
    expect(again.status).toBe(200);
    expect(again.body.acknowledgedBy).toBe("responder@acme.test");
    expect((await timelineOf(incident.id)).filter((e) => e.kind === "acknowledged")).toHaveLength(1);

    const audit = await app.call("GET", `/o/${OWNER.org}/audit-events`, { token: ownerToken });
    await expect
      .poll(async () => (await app.call("GET", `/o/${OWNER.org}/audit-events`, { token: ownerToken })).body.events)
      .toContainEqual(expect.objectContaining({ kind: "incident.acknowledged", actor: "responder@acme.test", data: { incidentId: incident.id } }));
    expect(audit.status).toBe(200);

    const published = await db<{ subject: string; payload: Buffer }[]>`
      select subject, payload from incidents.outbox_tap where subject = 'events.incident.timeline_recorded' order by seq`;
    const kinds = published.map((r) => fromBinary(TimelineRecordedSchema, r.payload)).filter((e) => e.incidentId === incident.id);
    expect(kinds.filter((e) => e.kind === "acknowledged")).toHaveLength(1);
  });

  it("refuses a resolved incident, and says why", async () => {
    const incident = await open();
    expect((await app.call("POST", path(incident.id, "resolve"), { token: ownerToken })).status).toBe(200);
    const res = await app.call("POST", path(incident.id, "acknowledge"), { token: memberToken });
    expect(res.status).toBe(409);
    expect(res.body.error).toBe("the incident is resolved; only an open incident is acknowledged");
  });

  it("answers over Connect and gRPC as over REST, with the same refusals", async () => {
    for (const kind of ["connect", "grpc"] as const) {
      const incident = await open();
      const acked = await publicClient(kind, memberToken).acknowledgeIncident({ org: OWNER.org, id: incident.id });
      expect(acked.acknowledgedBy, kind).toBe("responder@acme.test");
      expect(acked.acknowledgedAt, kind).toBeDefined();
      expect(await codeOf(publicClient(kind).acknowledgeIncident({ org: OWNER.org, id: incident.id })), kind).toBe("Unauthenticated");
      expect(await codeOf(publicClient(kind, otherOrgToken).acknowledgeIncident({ org: OWNER.org, id: incident.id })), kind).toBe("PermissionDenied");
      expect(await codeOf(publicClient(kind, memberToken).acknowledgeIncident({ org: OWNER.org, id: "00000000-0000-4000-8000-000000000000" })), kind).toBe(
        "NotFound",
      );
    }
  });

  it("answers 401 without a credential and 404 for another organization's incident", async () => {
    const incident = await open();
    expect((await app.call("POST", path(incident.id, "acknowledge"))).status).toBe(401);
    const foreign = await app.call("POST", `/o/${OTHER.org}/incidents/${incident.id}/acknowledge`, { token: otherOrgToken });
    expect(foreign.status).toBe(404);
  });
});

describe("owner", () => {
  it("assigns to a member, records the change, audits it, and clears it", async () => {
    const incident = await open();
    const set = await app.call("PUT", path(incident.id, "owner"), { token: ownerToken, body: { ownerId: memberId } });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ ownerId: memberId, ownerEmail: "responder@acme.test" });
    const entry = set.body.timeline.find((e: { kind: string }) => e.kind === "owner_changed");
    expect(entry.data).toEqual({ from: null, to: "responder@acme.test", fromId: null, toId: memberId, actor: OWNER.email });

    // The same owner again records nothing.
    expect((await app.call("PUT", path(incident.id, "owner"), { token: ownerToken, body: { ownerId: memberId } })).status).toBe(200);
    const moved = await app.call("PUT", path(incident.id, "owner"), { token: memberToken, body: { ownerId } });
    expect(moved.body.ownerEmail).toBe(OWNER.email);
    const cleared = await app.call("PUT", path(incident.id, "owner"), { token: memberToken, body: { ownerId: "" } });
    expect(cleared.status).toBe(200);
    expect(cleared.body.ownerId).toBeNull();
    expect((await timelineOf(incident.id)).filter((e) => e.kind === "owner_changed").map((e) => e.data.to)).toEqual(["responder@acme.test", OWNER.email, null]);
    await expect
      .poll(async () => (await app.call("GET", `/o/${OWNER.org}/audit-events`, { token: ownerToken })).body.events)
      .toContainEqual(expect.objectContaining({ kind: "incident.owner_changed", data: { incidentId: incident.id, from: null, to: memberId } }));
  });

  it("refuses someone who is not a member of the organization, and says where to find members", async () => {
    const incident = await open();
    const members = await app.call("GET", `/o/${OTHER.org}/members`, { token: otherOrgToken });
    const outsider = members.body.members[0].id;
    for (const candidate of [outsider, "not-an-id"]) {
      const res = await app.call("PUT", path(incident.id, "owner"), { token: ownerToken, body: { ownerId: candidate } });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe(`ownerId ${candidate} is not a member of acme: take an id from GET /o/acme/members`);
    }
  });

  it("answers over Connect and gRPC, and refuses an archived incident", async () => {
    for (const kind of ["connect", "grpc"] as const) {
      const incident = await open();
      const set = await publicClient(kind, memberToken).setIncidentOwner({ org: OWNER.org, id: incident.id, ownerId: memberId });
      expect(set.ownerId, kind).toBe(memberId);
      expect(await codeOf(publicClient(kind, otherOrgToken).setIncidentOwner({ org: OWNER.org, id: incident.id, ownerId: memberId })), kind).toBe(
        "PermissionDenied",
      );
      await publicClient(kind, memberToken).archiveIncident({ org: OWNER.org, id: incident.id });
      expect(await codeOf(publicClient(kind, memberToken).setIncidentOwner({ org: OWNER.org, id: incident.id, ownerId })), kind).toBe("FailedPrecondition");
    }
  });
});

describe("notes", () => {
  it("adds a person's plain-text note to the timeline, in any state", async () => {
    const incident = await open();
    const res = await app.call("POST", path(incident.id, "notes"), { token: memberToken, body: { text: "  <b>Restarted</b> the pods  " } });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ kind: "note", summary: "<b>Restarted</b> the pods", data: { actor: "responder@acme.test" } });
    await app.call("POST", path(incident.id, "resolve"), { token: ownerToken });
    expect((await app.call("POST", path(incident.id, "notes"), { token: ownerToken, body: { text: "Post-mortem on Monday" } })).status).toBe(201);
    const notes = (await timelineOf(incident.id)).filter((e) => e.kind === "note");
    expect(notes.map((e) => e.summary)).toEqual(["<b>Restarted</b> the pods", "Post-mortem on Monday"]);
  });

  it("holds a note to the limit of every summary, and refuses an empty one", async () => {
    const incident = await open();
    const longest = "n".repeat(65536);
    expect((await app.call("POST", path(incident.id, "notes"), { token: memberToken, body: { text: longest } })).status).toBe(201);
    const tooLong = await app.call("POST", path(incident.id, "notes"), { token: memberToken, body: { text: `${longest}n` } });
    expect(tooLong.status).toBe(400);
    expect(tooLong.body.error).toBe("text is 65537 characters, longer than 65536: shorten the note or split it in two");
    const empty = await app.call("POST", path(incident.id, "notes"), { token: memberToken, body: { text: "   " } });
    expect(empty.status).toBe(400);
    expect(empty.body.error).toBe("text is empty: write the note's text");
    // The credential is checked before the text: a caller without one learns nothing.
    expect((await app.call("POST", path(incident.id, "notes"), { body: { text: "" } })).status).toBe(401);
  });

  it("answers over Connect and gRPC with the same limits", async () => {
    for (const kind of ["connect", "grpc"] as const) {
      const incident = await open();
      const entry = await publicClient(kind, memberToken).addIncidentNote({ org: OWNER.org, id: incident.id, text: `via ${kind}` });
      expect(entry.kind, kind).toBe("note");
      expect(entry.summary, kind).toBe(`via ${kind}`);
      expect(await codeOf(publicClient(kind, memberToken).addIncidentNote({ org: OWNER.org, id: incident.id, text: "x".repeat(65537) })), kind).toBe(
        "InvalidArgument",
      );
      expect(await codeOf(publicClient(kind, otherOrgToken).addIncidentNote({ org: OWNER.org, id: incident.id, text: "hi" })), kind).toBe("PermissionDenied");
    }
  });
});

describe("the list for triage", () => {
  const list = async (query: string) => {
    const res = await app.call("GET", `/o/${OWNER.org}/incidents?source=triage-list&${query}`, { token: ownerToken });
    expect(res.status, query).toBe(200);
    return res.body as { incidents: any[]; nextCursor?: string };
  };
  const titles = async (query: string) => (await list(query)).incidents.map((i) => i.title);

  it("filters by severity, source, entity, acknowledged, owner and title, sorts by severity or activity", async () => {
    const source = "triage-list";
    const a = await open({ source, title: "Disk full on db-1", severity: "sev2", entity: { kind: "host", id: "db-1" }, attachIdentity: "triage:a" });
    const b = await open({ source, title: "Checkout latency", severity: "sev1", entity: { kind: "service", id: "checkout" }, attachIdentity: "triage:b" });
    const c = await open({ source, title: "DISK almost full on db-2", severity: "sev4", entity: { kind: "host", id: "db-2" }, attachIdentity: "triage:c" });
    await app.call("POST", path(b.id, "acknowledge"), { token: memberToken });
    await app.call("PUT", path(c.id, "owner"), { token: ownerToken, body: { ownerId: memberId } });
    // The oldest gets the latest activity: a repeat, then a recovery from its source.
    expect((await deliver({ source, attachIdentity: "triage:a", eventId: "triage-a-2", title: "again" })).outcome).toBe("attached");
    expect((await deliver({ source, attachIdentity: "triage:a", eventId: "triage-a-3", kind: "recovery" })).outcome).toBe("recorded");

    expect(await titles("")).toEqual([c.title, b.title, a.title]);
    expect(await titles("severity=sev1,sev2")).toEqual([b.title, a.title]);
    expect(await titles("entityId=db-1")).toEqual([a.title]);
    expect(await titles("entityKind=host&entityId=db-2")).toEqual([c.title]);
    expect(await titles("acknowledged=yes")).toEqual([b.title]);
    expect(await titles("acknowledged=no")).toEqual([c.title, a.title]);
    expect(await titles(`ownerId=${memberId}`)).toEqual([c.title]);
    expect(await titles("ownerId=none")).toEqual([b.title, a.title]);
    expect(await titles("q=disk")).toEqual([c.title, a.title]);
    expect(await titles("q=100%25")).toEqual([]);
    expect(await titles("sort=severity")).toEqual([b.title, a.title, c.title]);
    expect(await titles("sort=activity")).toEqual([a.title, c.title, b.title]);

    const [first] = (await list("entityId=db-1")).incidents;
    expect(first).toMatchObject({ repeatCount: 1, recoveredAtSource: true, acknowledgedAt: null, ownerId: null });
    expect(Date.parse(first.lastActivityAt)).toBeGreaterThan(Date.parse(first.openedAt));
    // A later alert makes the source's latest word a firing one again.
    await deliver({ source, attachIdentity: "triage:a", eventId: "triage-a-4", title: "firing again" });
    expect((await list("entityId=db-1")).incidents[0]).toMatchObject({ repeatCount: 2, recoveredAtSource: false });
  });

  it("refuses a filter it does not know, and says what it takes", async () => {
    for (const [query, error] of [
      ["sort=oldest", "sort must be one of newest, severity, activity"],
      ["severity=sev0", "severity must be a comma-separated list of sev1, sev2, sev3, sev4"],
      ["acknowledged=maybe", "acknowledged must be yes or no"],
      ["ownerId=bob", "ownerId must be a member's id (GET /o/{org}/members) or none"],
      ["entityKind=host", "entityKind needs entityId: filter by the entity's id, and its kind if you like"],
    ]) {
      const res = await app.call("GET", `/o/${OWNER.org}/incidents?${query}`, { token: ownerToken });
      expect(res.status, query).toBe(400);
      expect(res.body.error, query).toBe(error);
    }
  });

  it("pages past the first 100 in every sort, each incident once", async () => {
    const source = "triage-pages";
    await internal.recordMany({
      deliveries: Array.from({ length: 230 }, (_, n) => ({
        orgId,
        orgSlug: OWNER.org,
        alert: create(AlertSchema, {
          source,
          kind: "alert",
          severity: `sev${(n % 4) + 1}`,
          attachIdentity: `pages:${n}`,
          eventId: `pages-${n}`,
          title: `Page ${n}`,
        }),
      })),
    });
    for (const sort of ["newest", "severity", "activity"]) {
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const res = await app.call("GET", `/o/${OWNER.org}/incidents?source=${source}&sort=${sort}${cursor ? `&cursor=${cursor}` : ""}`, {
          token: ownerToken,
        });
        expect(res.status).toBe(200);
        seen.push(...res.body.incidents.map((i: { id: string }) => i.id));
        cursor = res.body.nextCursor ?? undefined;
        pages++;
      } while (cursor);
      expect(pages, sort).toBe(3);
      expect(new Set(seen).size, sort).toBe(230);
    }
    const sev = await app.call("GET", `/o/${OWNER.org}/incidents?source=${source}&sort=severity&limit=1000`, { token: ownerToken });
    const order = sev.body.incidents.map((i: { severity: string }) => i.severity);
    expect(order).toEqual([...order].sort());
  });
});
