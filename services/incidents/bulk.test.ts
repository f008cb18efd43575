import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import type postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AlertSchema, IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, type TestApp } from "../../test/support/app.js";
import { OTHER, type Responders, startResponders } from "./testing/responders.js";

/**
 * Bulk actions over every public surface (REST, Connect, gRPC, and the internal transport the
 * gateway calls through): each incident gets what the single action gives it, inside the caller's
 * organization only, with the same limits everywhere; and a bulk resolve racing repeats loses none.
 */

let app: TestApp;
let internal: Client<typeof IncidentsService>;
let orgId: string;
let otherOrgId: string;
let ownerToken: string;
let memberToken: string;
let memberId: string;
let otherOrgToken: string;
let db: postgres.Sql;

const BULK = `/o/${OWNER.org}/incidents:bulk`;

let responders: Responders;

beforeAll(async () => {
  responders = await startResponders();
  ({ app, internal, orgId, ownerToken, memberId, memberToken, otherOrgId, otherOrgToken, db } = responders);
});

afterAll(() => responders?.stop());

let sequence = 0;
type AlertInit = { attachIdentity?: string; eventId?: string; title?: string; severity?: string; source?: string; kind?: string };
async function deliver(init: AlertInit, org = { id: orgId, slug: OWNER.org }) {
  return internal.record({
    orgId: org.id,
    orgSlug: org.slug,
    alert: create(AlertSchema, { source: "metrics-monitor", kind: "alert", severity: "sev3", ...init }),
  });
}
async function open(init: AlertInit = {}, org?: { id: string; slug: string }) {
  const n = ++sequence;
  const res = await deliver({ attachIdentity: `bulk:${n}`, eventId: `bulk-${n}`, title: `Bulk ${n}`, ...init }, org);
  expect(res.outcome).toBe("opened");
  return res.incident!;
}

const timelineOf = async (id: string) =>
  (await app.call("GET", `/o/${OWNER.org}/incidents/${id}/timeline?limit=500`, { token: ownerToken })).body.entries as {
    kind: string;
    summary: string;
    data: Record<string, unknown>;
    eventId?: string;
  }[];
const stateOf = async (id: string) => (await app.call("GET", `/o/${OWNER.org}/incidents/${id}`, { token: ownerToken })).body;

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

async function errorOf(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await promise;
    return { code: "OK", message: "" };
  } catch (err) {
    const e = ConnectError.from(err);
    return { code: Code[e.code], message: e.rawMessage };
  }
}

describe("bulk by ids", () => {
  it("resolves each incident as the single action does, and says what it did to each", async () => {
    const a = await open();
    const b = await open();
    const done = await open();
    expect((await app.call("POST", `/o/${OWNER.org}/incidents/${done.id}/resolve`, { token: ownerToken })).status).toBe(200);
    const archived = await open();
    expect((await app.call("POST", `/o/${OWNER.org}/incidents/${archived.id}/archive`, { token: ownerToken })).status).toBe(200);
    const foreign = await open({}, { id: otherOrgId, slug: OTHER.org });
    const missing = "00000000-0000-4000-8000-000000000000";

    const res = await app.call("POST", BULK, {
      token: memberToken,
      body: { ids: [a.id, b.id, done.id, archived.id, foreign.id, missing, "not-an-id"], action: "resolve" },
    });
    expect(res.status).toBe(200);
    // Absent values read as null, as everywhere in the JSON.
    expect(res.body).toEqual({
      matched: 7,
      nextCursor: null,
      outOfTime: false,
      remainingIds: [],
      results: [
        { id: a.id, outcome: "done", reason: null },
        { id: b.id, outcome: "done", reason: null },
        { id: done.id, outcome: "unchanged", reason: null },
        { id: archived.id, outcome: "refused", reason: "the incident is archived; an archived incident cannot be resolved" },
        { id: foreign.id, outcome: "not_found", reason: null },
        { id: missing, outcome: "not_found", reason: null },
        { id: "not-an-id", outcome: "not_found", reason: null },
      ],
    });
    // Exactly the single action's entry: who, once.
    for (const incident of [a, b]) {
      const entries = (await timelineOf(incident.id)).filter((e) => e.kind === "resolved");
      expect(entries).toEqual([expect.objectContaining({ summary: "Resolved by responder@acme.test", data: { actor: "responder@acme.test" } })]);
      expect((await stateOf(incident.id)).state).toBe("resolved");
    }
    expect((await timelineOf(done.id)).filter((e) => e.kind === "resolved")).toHaveLength(1);
    // Another organization's incident is not touched, and its own owner still sees it open.
    const theirs = await app.call("GET", `/o/${OTHER.org}/incidents/${foreign.id}`, { token: otherOrgToken });
    expect(theirs.body.state).toBe("open");
    expect(theirs.body.timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened"]);
  });

  it("acknowledges and assigns with the single actions' entries and audit records", async () => {
    const a = await open();
    const resolved = await open();
    await app.call("POST", `/o/${OWNER.org}/incidents/${resolved.id}/resolve`, { token: ownerToken });

    const acked = await app.call("POST", BULK, { token: ownerToken, body: { ids: [a.id, resolved.id, a.id], action: "acknowledge" } });
    expect(acked.status).toBe(200);
    // A repeated id is acted on once.
    expect(acked.body.results).toEqual([
      { id: a.id, outcome: "done", reason: null },
      { id: resolved.id, outcome: "refused", reason: "the incident is resolved; only an open incident is acknowledged" },
    ]);
    expect((await stateOf(a.id)).acknowledgedBy).toBe(OWNER.email);

    const assigned = await app.call("POST", BULK, { token: ownerToken, body: { ids: [a.id, resolved.id], action: "assign", ownerId: memberId } });
    expect(assigned.body.results.map((r: { outcome: string }) => r.outcome)).toEqual(["done", "done"]);
    const again = await app.call("POST", BULK, { token: ownerToken, body: { ids: [a.id], action: "assign", ownerId: memberId } });
    expect(again.body.results).toEqual([{ id: a.id, outcome: "unchanged", reason: null }]);
    const owners = (await timelineOf(a.id)).filter((e) => e.kind === "owner_changed");
    expect(owners).toEqual([expect.objectContaining({ data: { from: null, to: "responder@acme.test", fromId: null, toId: memberId, actor: OWNER.email } })]);

    await expect
      .poll(async () => (await app.call("GET", `/o/${OWNER.org}/audit-events`, { token: ownerToken })).body.events)
      .toEqual(
        expect.arrayContaining([
          expect.objectContaining({ kind: "incident.acknowledged", actor: OWNER.email, data: { incidentId: a.id } }),
          expect.objectContaining({ kind: "incident.owner_changed", actor: OWNER.email, data: { incidentId: resolved.id, from: null, to: memberId } }),
        ]),
      );
  });

  it("archives open and resolved incidents", async () => {
    const a = await open();
    const b = await open();
    await app.call("POST", `/o/${OWNER.org}/incidents/${b.id}/resolve`, { token: ownerToken });
    const res = await app.call("POST", BULK, { token: ownerToken, body: { ids: [a.id, b.id], action: "archive" } });
    expect(res.body.results.map((r: { outcome: string }) => r.outcome)).toEqual(["done", "done"]);
    expect((await stateOf(a.id)).state).toBe("archived");
    expect((await stateOf(b.id)).state).toBe("archived");
  });
});

describe("bulk by filter", () => {
  it("resolves every open incident whose source says it recovered, and no other", async () => {
    const source = "log-analytics";
    const recovered = await open({ source, attachIdentity: "bulk:recovered-1" });
    await deliver({ source, kind: "recovery", attachIdentity: "bulk:recovered-1", eventId: "bulk-recovered-1-r" });
    const relapsed = await open({ source, attachIdentity: "bulk:relapsed" });
    await deliver({ source, kind: "recovery", attachIdentity: "bulk:relapsed", eventId: "bulk-relapsed-r" });
    await deliver({ source, attachIdentity: "bulk:relapsed", eventId: "bulk-relapsed-again", title: "again" });
    const firing = await open({ source });
    const theirs = await open({ source, attachIdentity: "bulk:recovered-other-org" }, { id: otherOrgId, slug: OTHER.org });
    await deliver({ source, kind: "recovery", attachIdentity: "bulk:recovered-other-org", eventId: "r" }, { id: otherOrgId, slug: OTHER.org });

    const listed = await app.call("GET", `/o/${OWNER.org}/incidents?state=open&source=${source}&recovered=yes`, { token: ownerToken });
    expect(listed.body.incidents.map((i: { id: string }) => i.id)).toEqual([recovered.id]);

    // A preview counts what the call would act on, and acts on none.
    const preview = await app.call("POST", BULK, {
      token: ownerToken,
      body: { filter: { state: "open", source, recovered: "yes" }, action: "resolve", preview: true },
    });
    expect(preview.body).toEqual({ matched: 1, nextCursor: null, outOfTime: false, remainingIds: [], results: [] });
    expect((await stateOf(recovered.id)).state).toBe("open");

    const res = await app.call("POST", BULK, { token: ownerToken, body: { filter: { state: "open", source, recovered: "yes" }, action: "resolve" } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      matched: 1,
      nextCursor: null,
      outOfTime: false,
      remainingIds: [],
      results: [{ id: recovered.id, outcome: "done", reason: null }],
    });
    expect((await stateOf(recovered.id)).state).toBe("resolved");
    expect((await stateOf(relapsed.id)).state).toBe("open");
    expect((await stateOf(firing.id)).state).toBe("open");
    const other = await app.call("GET", `/o/${OTHER.org}/incidents/${theirs.id}`, { token: otherOrgToken });
    expect(other.body).toMatchObject({ state: "open", recoveredAtSource: true });
  });

  it("acts on at most limit incidents a call, says how many matched, and continues from the cursor", async () => {
    const title = `paged-${Date.now()}`;
    const opened = [];
    for (let n = 0; n < 5; n++) opened.push(await open({ title: `${title} ${n}` }));
    const newestFirst = opened.map((i) => i.id).reverse();

    // acknowledge leaves each incident matching the filter: only the cursor moves the call on.
    const seen: string[] = [];
    let cursor: string | undefined;
    const matchedEachCall: number[] = [];
    for (;;) {
      const res = await app.call("POST", BULK, {
        token: ownerToken,
        body: { filter: { q: title }, action: "acknowledge", limit: 2, ...(cursor ? { cursor } : {}) },
      });
      expect(res.status).toBe(200);
      matchedEachCall.push(res.body.matched);
      for (const result of res.body.results as { id: string; outcome: string }[]) {
        expect(result.outcome).toBe("done");
        seen.push(result.id);
      }
      cursor = res.body.nextCursor;
      if (!cursor) break;
    }
    expect(seen).toEqual(newestFirst);
    expect(matchedEachCall).toEqual([5, 3, 1]);
  });

  it("refuses what the list refuses, in the same words", async () => {
    for (const [filter, message] of [
      [{ severity: "sev0" }, "severity must be a comma-separated list of sev1, sev2, sev3, sev4"],
      [{ recovered: "maybe" }, "recovered must be yes or no"],
      [{ state: "closed" }, "state must be open, resolved or archived"],
    ] as const) {
      const res = await app.call("POST", BULK, { token: ownerToken, body: { filter, action: "resolve" } });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe(message);
    }
  });
});

describe("who and what a call may ask", () => {
  it("refuses a call without a credential, or for another organization", async () => {
    const a = await open();
    expect((await app.call("POST", BULK, { body: { ids: [a.id], action: "resolve" } })).status).toBe(401);
    expect((await app.call("POST", BULK, { token: otherOrgToken, body: { ids: [a.id], action: "resolve" } })).status).toBe(403);
    expect((await stateOf(a.id)).state).toBe("open");
  });

  it("says what is wrong with a request", async () => {
    const a = await open();
    for (const [body, message] of [
      [{ action: "resolve" }, "give either ids (the incidents to act on) or filter (every incident matching it), not both and not neither"],
      [
        { ids: [a.id], filter: {}, action: "resolve" },
        "give either ids (the incidents to act on) or filter (every incident matching it), not both and not neither",
      ],
      [{ ids: [a.id], action: "close" }, "action must be one of acknowledge, assign, resolve, archive"],
      [{ ids: [a.id], action: "assign" }, `action assign needs ownerId: take a member's id from GET /o/${OWNER.org}/members`],
      [{ ids: [a.id], action: "resolve", ownerId: memberId }, "ownerId goes with action assign, not resolve: leave it out"],
      [
        { ids: [a.id], action: "assign", ownerId: "00000000-0000-4000-8000-000000000000" },
        `ownerId 00000000-0000-4000-8000-000000000000 is not a member of ${OWNER.org}: take an id from GET /o/${OWNER.org}/members`,
      ],
      [{ filter: {}, action: "resolve", limit: 501 }, "limit must be between 1 and 500"],
      [{ ids: [a.id], action: "resolve", limit: 10 }, "limit and cursor go with filter; with ids every id is acted on"],
    ] as const) {
      const res = await app.call("POST", BULK, { token: ownerToken, body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error).toBe(message);
    }
    expect((await stateOf(a.id)).state).toBe("open");
  });

  it("holds the same limits on REST, Connect, gRPC and the internal transport: 500 ids, 64 KiB", async () => {
    const a = await open();
    const tooMany = [a.id, ...Array.from({ length: 500 }, (_, n) => `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`)];
    const rest = await app.call("POST", BULK, { token: ownerToken, body: { ids: tooMany, action: "resolve" } });
    expect(rest.status).toBe(400);
    expect(rest.body.error).toBe("ids may name at most 500 ids");
    for (const kind of ["connect", "grpc"] as const) {
      const refused = await errorOf(publicClient(kind, ownerToken).bulkUpdateIncidents({ org: OWNER.org, ids: tooMany, action: "resolve" }));
      expect(refused, kind).toEqual({ code: "InvalidArgument", message: rest.body.error });
    }
    const inside = await errorOf(internal.bulkUpdateIncidents({ org: OWNER.org, ids: tooMany, action: "resolve" }));
    expect(inside).toEqual({ code: "InvalidArgument", message: rest.body.error });

    // A body past 64 KiB is refused before it is read to the end, on every surface of the port.
    const padded = JSON.stringify({ ids: [a.id], action: "resolve", filler: "x".repeat(64 * 1024) });
    const big = await app.call("POST", BULK, { token: ownerToken, raw: padded, headers: { "content-type": "application/json" } });
    expect(big.status).toBe(413);
    const longIds = Array.from({ length: 500 }, () => "x".repeat(200));
    for (const kind of ["connect", "grpc"] as const) {
      const refused = await errorOf(publicClient(kind, ownerToken).bulkUpdateIncidents({ org: OWNER.org, ids: longIds, action: "resolve" }));
      expect(refused.code, kind).toBe("ResourceExhausted");
    }
    expect((await stateOf(a.id)).state).toBe("open");
  });

  it("answers over Connect and gRPC as over REST", async () => {
    for (const kind of ["connect", "grpc"] as const) {
      const a = await open();
      const res = await publicClient(kind, memberToken).bulkUpdateIncidents({ org: OWNER.org, ids: [a.id], action: "resolve" });
      expect(
        res.results.map((r) => ({ id: r.id, outcome: r.outcome })),
        kind,
      ).toEqual([{ id: a.id, outcome: "done" }]);
      expect(res.matched).toBe(1);
      expect((await errorOf(publicClient(kind).bulkUpdateIncidents({ org: OWNER.org, ids: [a.id], action: "resolve" }))).code, kind).toBe("Unauthenticated");
    }
  });
});

describe("a bulk call on a slow database", () => {
  // Every write of a "Slow …" incident waits 400 ms in the database (a trigger of this test's
  // database): a call over many of them cannot finish inside its caller's deadline.
  async function slowWrites(on: boolean) {
    if (!on) {
      await db.unsafe("drop trigger if exists bulk_test_slow on incidents.incidents");
      return;
    }
    await db.unsafe(
      "create or replace function incidents.bulk_test_slow() returns trigger language plpgsql as $$ begin perform pg_sleep(0.4); return new; end $$",
    );
    await db.unsafe(
      "create trigger bulk_test_slow before update on incidents.incidents for each row when (old.title like 'Slow %') execute function incidents.bulk_test_slow()",
    );
  }
  async function resolvedEntries(id: string) {
    return (await db<{ n: number }[]>`select count(*)::int as n from incidents.timeline_entries where incident_id = ${id} and kind = 'resolved'`)[0]!.n;
  }
  const DEADLINE_MS = 3000;
  const COUNT = 12;

  it("answers inside the caller's deadline with what it did and a cursor, and the next call does the rest once", async () => {
    const tag = `slow-filter-${Date.now()}`;
    const incidents = [];
    for (let n = 0; n < COUNT; n++) incidents.push(await open({ attachIdentity: `${tag}:${n}`, title: `Slow ${tag} ${n}` }));
    const filter = { state: "open", q: tag };
    await slowWrites(true);
    let first: Awaited<ReturnType<Client<typeof IncidentsService>["bulkUpdateIncidents"]>>;
    try {
      const started = Date.now();
      first = await publicClient("connect", ownerToken).bulkUpdateIncidents({ org: OWNER.org, filter, action: "resolve" }, { timeoutMs: DEADLINE_MS });
      expect(Date.now() - started).toBeLessThan(DEADLINE_MS);
    } finally {
      await slowWrites(false);
    }
    expect(first.outOfTime).toBe(true);
    expect(first.matched).toBe(COUNT);
    expect(first.results.length).toBeGreaterThan(0);
    expect(first.results.length).toBeLessThan(COUNT);
    expect(first.results.every((r) => r.outcome === "done")).toBe(true);
    expect(first.nextCursor).toBeTruthy();
    expect(first.remainingIds).toEqual([]);

    // The continuation over REST: the same filter and action with the cursor acts on the rest only.
    const rest = await app.call("POST", BULK, { token: ownerToken, body: { filter, action: "resolve", cursor: first.nextCursor } });
    expect(rest.status).toBe(200);
    expect(rest.body.outOfTime).toBe(false);
    expect(rest.body.nextCursor).toBeNull();
    const done = [...first.results.map((r) => r.id), ...rest.body.results.map((r: { id: string }) => r.id)];
    expect(rest.body.results.every((r: { outcome: string }) => r.outcome === "done")).toBe(true);
    expect(done.sort()).toEqual(incidents.map((i) => i.id).sort());
    for (const incident of incidents) {
      expect((await stateOf(incident.id)).state).toBe("resolved");
      expect(await resolvedEntries(incident.id)).toBe(1);
    }
  });

  it("with ids: answers the ids it did not start, untouched, and they complete once in the next call", async () => {
    const tag = `slow-ids-${Date.now()}`;
    const incidents = [];
    for (let n = 0; n < COUNT; n++) incidents.push(await open({ attachIdentity: `${tag}:${n}`, title: `Slow ${tag} ${n}` }));
    const ids = incidents.map((i) => i.id);
    await slowWrites(true);
    let first: Awaited<ReturnType<Client<typeof IncidentsService>["bulkUpdateIncidents"]>>;
    try {
      const started = Date.now();
      first = await publicClient("grpc", ownerToken).bulkUpdateIncidents({ org: OWNER.org, ids, action: "acknowledge" }, { timeoutMs: DEADLINE_MS });
      expect(Date.now() - started).toBeLessThan(DEADLINE_MS);
    } finally {
      await slowWrites(false);
    }
    expect(first.outOfTime).toBe(true);
    expect(first.results.length).toBeGreaterThan(0);
    expect(first.results.every((r) => r.outcome === "done")).toBe(true);
    expect([...first.results.map((r) => r.id), ...first.remainingIds]).toEqual(ids);
    for (const id of first.remainingIds) {
      const read = await stateOf(id);
      expect(read.acknowledgedBy).toBeNull();
      expect(read.timeline.filter((e: { kind: string }) => e.kind === "acknowledged")).toEqual([]);
    }

    const rest = await app.call("POST", BULK, { token: ownerToken, body: { ids: first.remainingIds, action: "acknowledge" } });
    expect(rest.status).toBe(200);
    expect(rest.body.results.map((r: { id: string; outcome: string }) => [r.id, r.outcome])).toEqual(first.remainingIds.map((id) => [id, "done"]));
    for (const id of ids) {
      const read = await stateOf(id);
      expect(read.acknowledgedBy).toBe(OWNER.email);
      expect(read.timeline.filter((e: { kind: string }) => e.kind === "acknowledged")).toHaveLength(1);
    }
  });
});

describe("a bulk resolve racing repeats", () => {
  it("records every repeat: on the resolved incident before its resolve, or on a new incident after", async () => {
    const count = 20;
    const perIncident = 6;
    const tag = `race-${Date.now()}`;
    const incidents = [];
    for (let n = 0; n < count; n++) incidents.push(await open({ attachIdentity: `${tag}:${n}`, eventId: `${tag}-${n}-0` }));

    const repeats = Array.from({ length: count }, (_, n) =>
      Array.from({ length: perIncident }, (_, k) => deliver({ attachIdentity: `${tag}:${n}`, eventId: `${tag}-${n}-${k + 1}`, title: `again ${n}` })),
    ).flat();
    const [bulk, ...outcomes] = await Promise.all([
      app.call("POST", BULK, { token: ownerToken, body: { ids: incidents.map((i) => i.id), action: "resolve" } }),
      ...repeats,
    ]);
    expect(bulk.status).toBe(200);
    expect(bulk.body.results.every((r: { outcome: string }) => r.outcome === "done")).toBe(true);
    for (const outcome of outcomes) expect(["attached", "opened"]).toContain(outcome.outcome);

    // Every delivery's event identifier is held exactly once, on the old incident or a new one of
    // the same identity; nothing was recorded on an incident after its resolve.
    for (let n = 0; n < count; n++) {
      const rows = await db<{ incident_id: string; event_id: string; kind: string; after_resolve: boolean }[]>`
        select t.incident_id, t.event_id, t.kind,
          t.id > coalesce((select max(r.id) from incidents.timeline_entries r where r.incident_id = t.incident_id and r.kind = 'resolved'), t.id) as after_resolve
        from incidents.timeline_entries t join incidents.incidents i on i.id = t.incident_id
        where i.org_id = ${orgId} and i.attach_identity = ${`${tag}:${n}`} and t.event_id is not null`;
      expect(rows.map((r) => r.event_id).sort()).toEqual(Array.from({ length: perIncident + 1 }, (_, k) => `${tag}-${n}-${k}`).sort());
      expect(rows.filter((r) => r.after_resolve)).toEqual([]);
      const resolvedEntries = await db<{ n: number }[]>`
        select count(*)::int as n from incidents.timeline_entries where incident_id = ${incidents[n]!.id} and kind = 'resolved'`;
      expect(resolvedEntries[0]!.n).toBe(1);
    }
  });
});

describe("severity sort", () => {
  it("breaks ties by repeats (more first), then by latest activity (newest first)", async () => {
    const source = "opsgenie";
    const quiet = await open({ source, severity: "sev1" });
    const busy = await open({ source, severity: "sev1", attachIdentity: "bulk:busy" });
    const recent = await open({ source, severity: "sev1" });
    const lower = await open({ source, severity: "sev2", attachIdentity: "bulk:lower" });
    for (let k = 0; k < 3; k++) await deliver({ source, attachIdentity: "bulk:busy", eventId: `bulk-busy-${k}`, title: "x", severity: "sev1" });
    for (let k = 0; k < 5; k++) await deliver({ source, attachIdentity: "bulk:lower", eventId: `bulk-lower-${k}`, title: "x", severity: "sev2" });
    // The oldest without repeats gets the latest activity: a note.
    await app.call("POST", `/o/${OWNER.org}/incidents/${quiet.id}/notes`, { token: ownerToken, body: { text: "looking" } });

    const res = await app.call("GET", `/o/${OWNER.org}/incidents?source=${source}&sort=severity`, { token: ownerToken });
    expect(res.body.incidents.map((i: { id: string; repeatCount: number }) => [i.id, i.repeatCount])).toEqual([
      [busy.id, 3],
      [quiet.id, 0],
      [recent.id, 0],
      [lower.id, 5],
    ]);
  });
});
