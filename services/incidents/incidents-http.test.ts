import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IncidentOpenedSchema, IncidentResolvedSchema, TimelineRecordedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { AlertSchema, IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, startApp, type TestApp } from "../../test/support/app.js";
import { tapOutbox } from "../../test/support/outbox-tap.js";

/** The public incident routes over real HTTP: list, get, resolve, archive; roles; events. */

let app: TestApp;
let client: Client<typeof IncidentsService>;
let orgId: string;
let ownerToken: string;
let memberToken: string;
let otherOrgToken: string;
let otherOrgId: string;
let db: postgres.Sql;

const OTHER = { org: "globex", email: "owner@globex.test", password: "another horse battery" };

beforeAll(async () => {
  app = await startApp();
  client = createClient(IncidentsService, app.process.transport);
  const identity = createClient(IdentityService, app.process.transport);
  orgId = (await identity.getOrganization({ slug: OWNER.org })).id;
  ownerToken = await app.ownerToken();
  const added = await app.call("POST", `/o/${OWNER.org}/members`, {
    token: ownerToken,
    body: { email: "member@acme.test", password: "member password", role: "member" },
  });
  expect(added.status).toBe(201);
  memberToken = (await app.call("POST", "/auth/login", { body: { email: "member@acme.test", password: "member password", orgSlug: OWNER.org } })).body
    .accessToken;
  otherOrgId = (await identity.bootstrap({ orgSlug: OTHER.org, ownerEmail: OTHER.email, ownerPassword: OTHER.password })).organization!.id;
  otherOrgToken = (await app.call("POST", "/auth/login", { body: { email: OTHER.email, password: OTHER.password, orgSlug: OTHER.org } })).body.accessToken;
  db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  await tapOutbox(db, "incidents");
});

afterAll(async () => {
  await db?.end();
  await app?.stop();
});

let sequence = 0;
async function open(init: Partial<MessageInitShape<typeof AlertSchema>> = {}, org = { id: orgId, slug: OWNER.org }) {
  const res = await client.record({
    orgId: org.id,
    orgSlug: org.slug,
    alert: create(AlertSchema, {
      source: "metrics-monitor",
      kind: "alert",
      attachIdentity: `metrics-monitor:http:${++sequence}`,
      eventId: `evt-${sequence}`,
      title: `Alert ${sequence}`,
      severity: "sev3",
      ...init,
    }),
  });
  expect(res.outcome).toBe("opened");
  return res.incident!;
}

const path = (id = "", action = "") => `/o/${OWNER.org}/incidents${id ? `/${id}` : ""}${action ? `/${action}` : ""}`;

describe("authentication and organizations", () => {
  it("answers 401 without a credential on every incident route", async () => {
    const incident = await open();
    for (const [method, p] of [
      ["GET", path()],
      ["GET", path(incident.id)],
      ["POST", path(incident.id, "resolve")],
      ["POST", path(incident.id, "archive")],
    ] as const) {
      const res = await app.call(method, p);
      expect(res.status, `${method} ${p}`).toBe(401);
      expect(res.body.error).toBeTruthy();
    }
  });

  it("answers 403 for a credential of another organization", async () => {
    const incident = await open();
    expect((await app.call("GET", path(), { token: otherOrgToken })).status).toBe(403);
    expect((await app.call("GET", path(incident.id), { token: otherOrgToken })).status).toBe(403);
    expect((await app.call("POST", path(incident.id, "resolve"), { token: otherOrgToken })).status).toBe(403);
  });

  it("answers 404 for an unknown id, a malformed id and another organization's incident", async () => {
    const theirs = await open({}, { id: otherOrgId, slug: OTHER.org });
    const mine = await open();
    for (const id of ["00000000-0000-4000-8000-000000000000", "not-an-id", theirs.id]) {
      for (const [method, action] of [
        ["GET", ""],
        ["POST", "resolve"],
        ["POST", "archive"],
      ] as const) {
        const res = await app.call(method, path(id, action), { token: memberToken });
        expect(res.status, `${method} ${id} ${action}`).toBe(404);
        expect(res.body).toEqual({ error: "no such incident" });
      }
    }
    // And the other organization sees its own, not ours.
    expect((await app.call("GET", `/o/${OTHER.org}/incidents/${theirs.id}`, { token: otherOrgToken })).status).toBe(200);
    expect((await app.call("GET", `/o/${OTHER.org}/incidents/${mine.id}`, { token: otherOrgToken })).status).toBe(404);
    // Their resolve attempt did nothing to it.
    expect((await app.call("GET", `/o/${OTHER.org}/incidents/${theirs.id}`, { token: otherOrgToken })).body.state).toBe("open");
  });
});

describe("GET /o/{org}/incidents/{id}", () => {
  it("reads an incident in the DESIGN shape with its whole timeline, opened first", async () => {
    const identity = `metrics-monitor:http:get:${++sequence}`;
    const incident = await open({
      attachIdentity: identity,
      eventId: "g1",
      entity: { kind: "service", id: "payments" },
      summary: "p99 latency above 2s",
      link: "https://monitor.example/a/1",
      alertRef: "alert 1",
    });
    await client.record({
      orgId,
      orgSlug: OWNER.org,
      alert: create(AlertSchema, { source: "metrics-monitor", kind: "alert", attachIdentity: identity, eventId: "g2", title: "x", severity: "sev3" }),
    });
    await client.record({
      orgId,
      orgSlug: OWNER.org,
      alert: create(AlertSchema, { source: "metrics-monitor", kind: "recovery", attachIdentity: identity, eventId: "g3" }),
    });
    const res = await app.call("GET", path(incident.id), { token: memberToken });
    expect(res.status).toBe(200);
    const body = res.body;
    expect(Object.keys(body).sort()).toEqual(
      [
        "acknowledgedAt",
        "acknowledgedBy",
        "archivedAt",
        "correlationGroupId",
        "correlationGroupSize",
        "entity",
        "id",
        "lastActivityAt",
        "nextEscalation",
        "openedAt",
        "ownerEmail",
        "ownerId",
        "recoveredAtSource",
        "related",
        "repeatCount",
        "resolvedAt",
        "runbookUrl",
        "severity",
        "source",
        "state",
        "timeline",
        "timelineNextCursor",
        "title",
        "workspaceUrl",
      ].sort(),
    );
    expect(body).toMatchObject({
      id: incident.id,
      title: incident.title,
      severity: "sev3",
      state: "open",
      source: "metrics-monitor",
      entity: { kind: "service", id: "payments" },
      workspaceUrl: `${app.process.config.publicUrl}/o/${OWNER.org}/incidents/${incident.id}`,
      resolvedAt: null,
      archivedAt: null,
      runbookUrl: null,
      // Fields added to the design's shape (docs/ARCHITECTURE.md): the repeat and the recovery
      // recorded above, and no responder yet.
      repeatCount: 1,
      recoveredAtSource: true,
      acknowledgedAt: null,
      acknowledgedBy: null,
      ownerId: null,
      ownerEmail: null,
    });
    expect(Number.isNaN(Date.parse(body.openedAt))).toBe(false);
    expect(body.lastActivityAt).toBe(body.timeline.at(-1).at);
    expect(body.timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened", "repeat", "recovery"]);
    expect(body.timeline[0]).toMatchObject({
      kind: "opened",
      summary: "p99 latency above 2s",
      link: "https://monitor.example/a/1",
      alertRef: "alert 1",
      eventId: "g1",
      data: null,
    });
    expect(body.timeline[2]).toMatchObject({ kind: "recovery", summary: null, link: null, alertRef: null, eventId: "g3" });
  });

  it("reads an incident without entity as entity null", async () => {
    const incident = await open();
    const res = await app.call("GET", path(incident.id), { token: memberToken });
    expect(res.body.entity).toBeNull();
  });
});

describe("GET /o/{org}/incidents", () => {
  it("lists newest first, without timelines, filtered by state and bounded by limit", async () => {
    const a = await open();
    const b = await open();
    const c = await open();
    await app.call("POST", path(b.id, "resolve"), { token: memberToken });
    await app.call("POST", path(c.id, "archive"), { token: memberToken });

    const all = await app.call("GET", path(), { token: memberToken });
    expect(all.status).toBe(200);
    expect(Object.keys(all.body)).toEqual(["incidents", "nextCursor"]);
    expect(all.body.nextCursor).toBeNull();
    const ids = all.body.incidents.map((i: { id: string }) => i.id);
    expect(ids.indexOf(c.id)).toBeLessThan(ids.indexOf(b.id));
    expect(ids.indexOf(b.id)).toBeLessThan(ids.indexOf(a.id));
    expect(all.body.incidents.every((i: { timeline: unknown[] }) => i.timeline.length === 0)).toBe(true);
    const times = all.body.incidents.map((i: { openedAt: string }) => Date.parse(i.openedAt));
    expect([...times].sort((x, y) => y - x)).toEqual(times);

    const states = async (state: string) =>
      (await app.call("GET", `${path()}?state=${state}`, { token: memberToken })).body.incidents.map((i: { id: string; state: string }) => [i.id, i.state]);
    const open_ = await states("open");
    expect(open_.every(([, s]: string[]) => s === "open")).toBe(true);
    expect(open_.map(([id]: string[]) => id)).toContain(a.id);
    expect(await states("resolved")).toContainEqual([b.id, "resolved"]);
    expect((await states("resolved")).every(([, s]: string[]) => s === "resolved")).toBe(true);
    expect(await states("archived")).toContainEqual([c.id, "archived"]);

    const limited = await app.call("GET", `${path()}?limit=2`, { token: memberToken });
    expect(limited.body.incidents.map((i: { id: string }) => i.id)).toEqual(ids.slice(0, 2));
    // Other organizations' incidents never appear.
    await open({}, { id: otherOrgId, slug: OTHER.org });
    const mine = await app.call("GET", path(), { token: memberToken });
    expect(mine.body.incidents.length).toBe(all.body.incidents.length);
  });

  it("refuses an unknown state and a limit out of range with 400", async () => {
    expect((await app.call("GET", `${path()}?state=closed`, { token: memberToken })).body).toEqual({ error: "state must be open, resolved or archived" });
    expect((await app.call("GET", `${path()}?state=closed`, { token: memberToken })).status).toBe(400);
    expect((await app.call("GET", `${path()}?limit=5000`, { token: memberToken })).status).toBe(400);
    expect((await app.call("GET", `${path()}?limit=-1`, { token: memberToken })).status).toBe(400);
  });
});

describe("resolve and archive by a person", () => {
  it("lets a member resolve: state resolved, resolvedAt set, a resolved entry naming the person", async () => {
    const incident = await open();
    const res = await app.call("POST", path(incident.id, "resolve"), { token: memberToken });
    expect(res.status).toBe(200);
    expect(res.body.state).toBe("resolved");
    expect(Number.isNaN(Date.parse(res.body.resolvedAt))).toBe(false);
    expect(res.body.archivedAt).toBeNull();
    const last = res.body.timeline.at(-1);
    expect(res.body.timeline[0].kind).toBe("opened");
    expect(last).toMatchObject({ kind: "resolved", summary: "Resolved by member@acme.test", data: { actor: "member@acme.test" } });
    expect(last.at).toBe(res.body.resolvedAt);
  });

  it("answers a second resolve with the incident unchanged and records nothing twice", async () => {
    const incident = await open();
    const first = await app.call("POST", path(incident.id, "resolve"), { token: memberToken });
    const second = await app.call("POST", path(incident.id, "resolve"), { token: ownerToken });
    expect(second.status).toBe(200);
    expect(second.body).toEqual(first.body);
    expect(second.body.timeline.filter((e: { kind: string }) => e.kind === "resolved")).toHaveLength(1);
  });

  it("archives a resolved incident, keeps resolvedAt, and refuses to resolve an archived one with 409", async () => {
    const incident = await open();
    const resolved = await app.call("POST", path(incident.id, "resolve"), { token: memberToken });
    const archived = await app.call("POST", path(incident.id, "archive"), { token: memberToken });
    expect(archived.status).toBe(200);
    expect(archived.body.state).toBe("archived");
    expect(archived.body.resolvedAt).toBe(resolved.body.resolvedAt);
    expect(Number.isNaN(Date.parse(archived.body.archivedAt))).toBe(false);
    expect(archived.body.timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened", "resolved", "archived"]);
    const again = await app.call("POST", path(incident.id, "archive"), { token: memberToken });
    expect(again.status).toBe(200);
    expect(again.body.timeline).toHaveLength(3);
    const resolve = await app.call("POST", path(incident.id, "resolve"), { token: memberToken });
    expect(resolve.status).toBe(409);
    expect(resolve.body).toEqual({ error: "the incident is archived; an archived incident cannot be resolved" });
  });

  it("archives an open incident directly", async () => {
    const incident = await open();
    const res = await app.call("POST", path(incident.id, "archive"), { token: memberToken });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ state: "archived", resolvedAt: null });
    expect(res.body.timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened", "archived"]);
  });

  it("orders a resolve racing deliveries: nothing is recorded after `resolved`, later deliveries open one new incident", async () => {
    const attachIdentity = `metrics-monitor:http:race:${++sequence}`;
    const first = await open({ attachIdentity, eventId: "r0" });
    const deliveries = Array.from({ length: 40 }, (_, i) =>
      client.record({
        orgId,
        orgSlug: OWNER.org,
        alert: create(AlertSchema, { source: "metrics-monitor", kind: "alert", attachIdentity, eventId: `r${i + 1}`, title: "race", severity: "sev3" }),
      }),
    );
    const resolve = app.call("POST", path(first.id, "resolve"), { token: memberToken });
    const results = await Promise.all(deliveries);
    expect((await resolve).status).toBe(200);

    const firstTimeline = (await app.call("GET", path(first.id), { token: memberToken })).body.timeline as { kind: string; eventId: string | null }[];
    expect(firstTimeline.at(-1)!.kind).toBe("resolved");
    const laterIds = new Set(results.map((r) => r.incident!.id).filter((id) => id !== first.id));
    expect(laterIds.size).toBeLessThanOrEqual(1);
    expect(results.filter((r) => r.outcome === "opened")).toHaveLength(laterIds.size);
    const seen = firstTimeline.map((e) => e.eventId).filter(Boolean);
    for (const id of laterIds) {
      const timeline = (await app.call("GET", path(id), { token: memberToken })).body.timeline as { eventId: string }[];
      seen.push(...timeline.map((e) => e.eventId));
    }
    // Every delivery is recorded exactly once, on the incident its answer named.
    expect(seen.sort()).toEqual(["r0", ...results.map((_, i) => `r${i + 1}`)].sort());
    for (const [i, r] of results.entries()) {
      if (r.incident!.id === first.id) expect(firstTimeline.map((e) => e.eventId)).toContain(`r${i + 1}`);
    }
  });
});

describe("domain events through the outbox", () => {
  async function eventsOf(incidentId: string) {
    const rows = await db<{ subject: string; payload: Buffer }[]>`select subject, payload from incidents.outbox_tap order by seq`;
    const out: { subject: string; kind?: string; state?: string; actor?: string; title?: string }[] = [];
    for (const row of rows) {
      const bytes = new Uint8Array(row.payload);
      if (row.subject === "events.incident.opened") {
        const e = fromBinary(IncidentOpenedSchema, bytes);
        if (e.incidentId === incidentId) out.push({ subject: row.subject, title: e.title });
      } else if (row.subject === "events.incident.timeline_recorded") {
        const e = fromBinary(TimelineRecordedSchema, bytes);
        if (e.incidentId === incidentId) out.push({ subject: row.subject, kind: e.kind });
      } else if (row.subject === "events.incident.resolved") {
        const e = fromBinary(IncidentResolvedSchema, bytes);
        if (e.incidentId === incidentId) out.push({ subject: row.subject, state: e.state, actor: e.actor });
      }
    }
    return out;
  }

  it("writes incident.opened, incident.timeline_recorded and incident.resolved for each change", async () => {
    const attachIdentity = `metrics-monitor:http:events:${++sequence}`;
    const incident = await open({ attachIdentity, eventId: "v1", title: "Disk full" });
    await client.record({
      orgId,
      orgSlug: OWNER.org,
      alert: create(AlertSchema, { source: "metrics-monitor", kind: "alert", attachIdentity, eventId: "v2", title: "Disk full", severity: "sev3" }),
    });
    // A redelivery writes no event.
    await client.record({
      orgId,
      orgSlug: OWNER.org,
      alert: create(AlertSchema, { source: "metrics-monitor", kind: "alert", attachIdentity, eventId: "v2", title: "Disk full", severity: "sev3" }),
    });
    await app.call("POST", path(incident.id, "resolve"), { token: memberToken });
    await app.call("POST", path(incident.id, "archive"), { token: ownerToken });
    // Which events, not their order: the outbox's own tests check the order.
    const byText = (events: object[]) => events.map((e) => JSON.stringify(e)).sort();
    expect(byText(await eventsOf(incident.id))).toEqual(
      byText([
        { subject: "events.incident.opened", title: "Disk full" },
        { subject: "events.incident.timeline_recorded", kind: "opened" },
        { subject: "events.incident.timeline_recorded", kind: "repeat" },
        { subject: "events.incident.resolved", state: "resolved", actor: "member@acme.test" },
        { subject: "events.incident.timeline_recorded", kind: "resolved" },
        { subject: "events.incident.resolved", state: "archived", actor: OWNER.email },
        { subject: "events.incident.timeline_recorded", kind: "archived" },
      ]),
    );
  });

  it("publishes what it wrote (the relay deletes the published rows)", async () => {
    const incident = await open();
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    for (;;) {
      const [row] = await db<{ pending: number }[]>`
        select count(*)::int as pending from incidents.outbox`;
      if (row!.pending === 0) break;
      if (Date.now() > deadline) throw new Error(`outbox still holds ${row!.pending} unpublished events for ${incident.id}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  });
});

describe("AppendTimeline", () => {
  it("records an entry with an event id once, however often and however concurrently it is appended", async () => {
    const incident = await open();
    const entry = { kind: "update_sent", summary: "Posted once", eventId: "comms-message:retried" };
    const answers = await Promise.all(Array.from({ length: 10 }, () => client.appendTimeline({ orgId, incidentId: incident.id, entry })));
    for (const answer of answers) expect(answer).toMatchObject({ kind: "update_sent", summary: "Posted once", eventId: "comms-message:retried" });
    await client.appendTimeline({ orgId, incidentId: incident.id, entry });
    const timeline = (await app.call("GET", path(incident.id), { token: memberToken })).body.timeline;
    expect(timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened", "update_sent"]);
  });

  it("appends an update_sent or update_simulated entry, also after a resolve", async () => {
    const incident = await open();
    const sent = await client.appendTimeline({
      orgId,
      incidentId: incident.id,
      entry: { kind: "update_sent", summary: "Posted to chatwebhook", data: { messageId: "m1" } },
    });
    expect(sent.kind).toBe("update_sent");
    expect(sent.at).toBeDefined();
    await app.call("POST", path(incident.id, "resolve"), { token: memberToken });
    await client.appendTimeline({ orgId, incidentId: incident.id, entry: { kind: "update_simulated", summary: "Egress is off" } });
    const timeline = (await app.call("GET", path(incident.id), { token: memberToken })).body.timeline;
    expect(timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened", "update_sent", "resolved", "update_simulated"]);
    expect(timeline[1]).toMatchObject({ summary: "Posted to chatwebhook", data: { messageId: "m1" } });
  });

  it("refuses kinds that only deliveries or people write, and another organization's incident", async () => {
    const incident = await open();
    for (const kind of ["opened", "repeat", "resolved", ""]) {
      const err = await client.appendTimeline({ orgId, incidentId: incident.id, entry: { kind } }).catch((e: unknown) => ConnectError.from(e));
      expect((err as ConnectError).code, kind).toBe(Code.InvalidArgument);
    }
    const other = await client
      .appendTimeline({ orgId: otherOrgId, incidentId: incident.id, entry: { kind: "update_sent" } })
      .catch((e: unknown) => ConnectError.from(e));
    expect((other as ConnectError).code).toBe(Code.NotFound);
    const unknown = await client.appendTimeline({ orgId, incidentId: "nope", entry: { kind: "update_sent" } }).catch((e: unknown) => ConnectError.from(e));
    expect((unknown as ConnectError).code).toBe(Code.NotFound);
  });
});
