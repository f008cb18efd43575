import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IncidentOpenedSchema, TimelineRecordedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { AlertSchema, IncidentsService, type Alert } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { freshDatabase, OWNER, startApp, type TestApp } from "../../test/support/app.js";
import { startPrivateNats, type PrivateNats } from "../../test/support/nats-server.js";
import { tapOutbox } from "../../test/support/outbox-tap.js";
import { createIdentityService } from "../identity/service.js";
import { createNatsTransport } from "../runtime/transport/nats-transport.js";
import { runProcess, type RunningProcess } from "../process/run-process.js";
import { createIncidentsService } from "./service.js";

/**
 * Record's contract, run over the in-memory transport and over NATS, and exactly-once under
 * concurrency in one process and across three processes sharing one database and one NATS.
 *
 * NATS: RPC subjects carry no deployment prefix, so two test runs on one NATS server would answer
 * each other's calls (against each other's databases). Each app over NATS therefore talks over a
 * private NATS server of its own, and so do the three processes.
 */

type AlertInit = MessageInitShape<typeof AlertSchema>;

function alert(init: AlertInit & { attachIdentity: string }): Alert {
  return create(AlertSchema, { source: "metrics-monitor", kind: "alert", title: "High CPU on checkout", severity: "sev2", eventId: "", ...init });
}

let sequence = 0;
/** An attach identity no other test uses. */
function identity(label: string): string {
  return `metrics-monitor:test:${label}:${++sequence}:${Date.now()}`;
}

interface Harness {
  app: TestApp;
  client: Client<typeof IncidentsService>;
  orgId: string;
  token: string;
}

async function harness(nats: boolean): Promise<Harness> {
  const app = await startApp({ nats });
  const sql = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  await tapOutbox(sql, "incidents").finally(() => sql.end());
  const transport: Transport = app.process.transport;
  const org = await createClient(IdentityService, transport).getOrganization({ slug: OWNER.org });
  return { app, client: createClient(IncidentsService, transport), orgId: org.id, token: await app.ownerToken() };
}

describe.each([
  { mode: "in-memory transport", nats: false },
  { mode: "NATS transport", nats: true },
])("Record over the $mode", ({ nats }) => {
  let h: Harness;
  const record = (a: Alert) => h.client.record({ orgId: h.orgId, orgSlug: OWNER.org, alert: a });
  /** The whole timeline: the incident's first page, then every further page from its cursor. */
  const timelineOf = async (id: string) => {
    const res = await h.app.call("GET", `/o/${OWNER.org}/incidents/${id}`, { token: h.token });
    expect(res.status).toBe(200);
    const entries = [...res.body.timeline] as { kind: string; eventId: string | null; summary: string | null }[];
    let cursor: string | null = res.body.timelineNextCursor;
    while (cursor) {
      const page = await h.app.call("GET", `/o/${OWNER.org}/incidents/${id}/timeline?cursor=${encodeURIComponent(cursor)}`, { token: h.token });
      expect(page.status).toBe(200);
      entries.push(...page.body.entries);
      cursor = page.body.nextCursor;
    }
    return entries;
  };

  beforeAll(async () => {
    h = await harness(nats);
  });
  afterAll(async () => {
    await h?.app.stop();
  });

  it("opens an incident for a new alert and answers its id, title, severity, state, source, entity, workspaceUrl, openedAt and runbook", async () => {
    const occurredAt = new Date("2024-05-01T10:00:00Z");
    const res = await record(
      alert({
        attachIdentity: identity("open"),
        eventId: "evt-1",
        entity: { kind: "service", id: "checkout" },
        summary: "CPU above 90% for 5 minutes",
        link: "https://monitor.example/alerts/1",
        alertRef: "alert 81234567",
        runbookUrl: "https://runbooks.example/cpu",
        occurredAt: timestampFromDate(occurredAt),
        data: { tags: ["service:checkout", "env:prod"] },
      }),
    );
    expect(res.outcome).toBe("opened");
    const incident = res.incident!;
    expect(incident.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(incident.title).toBe("High CPU on checkout");
    expect(incident.severity).toBe("sev2");
    expect(incident.state).toBe("open");
    expect(incident.source).toBe("metrics-monitor");
    expect(incident.entity).toMatchObject({ kind: "service", id: "checkout" });
    expect(incident.workspaceUrl).toBe(`${h.app.process.config.publicUrl}/o/${OWNER.org}/incidents/${incident.id}`);
    expect(incident.openedAt).toBeDefined();
    expect(incident.runbookUrl).toBe("https://runbooks.example/cpu");

    const timeline = await timelineOf(incident.id);
    expect(timeline).toEqual([
      {
        kind: "opened",
        at: "2024-05-01T10:00:00Z",
        summary: "CPU above 90% for 5 minutes",
        link: "https://monitor.example/alerts/1",
        alertRef: "alert 81234567",
        eventId: "evt-1",
        data: { tags: ["service:checkout", "env:prod"] },
      },
    ]);
  });

  it("attaches a repeat with a new event id and records it once; the same event again attaches without recording", async () => {
    const id = identity("repeat");
    const first = await record(alert({ attachIdentity: id, eventId: "e1" }));
    const second = await record(alert({ attachIdentity: id, eventId: "e2", summary: "still hot" }));
    const again = await record(alert({ attachIdentity: id, eventId: "e2" }));
    const openingAgain = await record(alert({ attachIdentity: id, eventId: "e1" }));
    expect(first.outcome).toBe("opened");
    expect(second.outcome).toBe("attached");
    expect(second.incident!.id).toBe(first.incident!.id);
    expect(second.reason).toBeUndefined();
    expect(again.outcome).toBe("attached");
    expect(again.incident!.id).toBe(first.incident!.id);
    expect(again.reason).toBe("this event identifier is already recorded on the open incident");
    expect(openingAgain.outcome).toBe("attached");
    const timeline = await timelineOf(first.incident!.id);
    expect(timeline.map((e) => [e.kind, e.eventId])).toEqual([
      ["opened", "e1"],
      ["repeat", "e2"],
    ]);
    expect(timeline[1]!.summary).toBe("still hot");
  });

  it("records every repeat without an event id (nothing identifies a redelivery)", async () => {
    const id = identity("no-event");
    const first = await record(alert({ attachIdentity: id }));
    await record(alert({ attachIdentity: id }));
    await record(alert({ attachIdentity: id }));
    expect((await timelineOf(first.incident!.id)).map((e) => e.kind)).toEqual(["opened", "repeat", "repeat"]);
  });

  it("opens a new incident for every alert without an attach identity", async () => {
    const a = await record(alert({ attachIdentity: "", source: "error-tracker", eventId: "same" }));
    const b = await record(alert({ attachIdentity: "", source: "error-tracker", eventId: "same" }));
    expect([a.outcome, b.outcome]).toEqual(["opened", "opened"]);
    expect(a.incident!.id).not.toBe(b.incident!.id);
    expect(a.incident!.entity).toBeUndefined();
  });

  it("keeps a retry key with the incident it opens: the same key again, alone or concurrent, answers that incident; after a resolve it opens anew", async () => {
    const retryKey = `retry-${++sequence}-${Date.now()}`;
    const withKey = () =>
      h.client.record({ orgId: h.orgId, orgSlug: OWNER.org, alert: alert({ attachIdentity: "", source: "error-tracker", eventId: "e" }), retryKey });
    const first = await withKey();
    const again = await withKey();
    expect([first.outcome, again.outcome]).toEqual(["opened", "opened"]);
    expect(again.incident!.id).toBe(first.incident!.id);
    expect((await timelineOf(first.incident!.id)).map((e) => e.kind)).toEqual(["opened"]);

    // Concurrent retries of a new key: one incident.
    const concurrentKey = `retry-${++sequence}-${Date.now()}`;
    const answers = await Promise.all(
      Array.from({ length: 10 }, () =>
        h.client.record({
          orgId: h.orgId,
          orgSlug: OWNER.org,
          alert: alert({ attachIdentity: "", source: "error-tracker", eventId: "c" }),
          retryKey: concurrentKey,
        }),
      ),
    );
    expect(new Set(answers.map((a) => a.incident!.id)).size).toBe(1);
    expect(answers.every((a) => a.outcome === "opened")).toBe(true);

    expect((await h.app.call("POST", `/o/${OWNER.org}/incidents/${first.incident!.id}/resolve`, { token: h.token })).status).toBe(200);
    const afterResolve = await withKey();
    expect(afterResolve.outcome).toBe("opened");
    expect(afterResolve.incident!.id).not.toBe(first.incident!.id);
  });

  it("records a recovery and a no-data notice on the open incident, which stays open", async () => {
    const id = identity("recovery");
    const opened = await record(alert({ attachIdentity: id, eventId: "a1" }));
    const recovered = await record(alert({ attachIdentity: id, eventId: "r1", kind: "recovery", summary: "back to normal" }));
    const noData = await record(alert({ attachIdentity: id, eventId: "n1", kind: "no_data" }));
    expect(recovered.outcome).toBe("recorded");
    expect(recovered.incident!.id).toBe(opened.incident!.id);
    expect(recovered.incident!.state).toBe("open");
    expect(noData.outcome).toBe("recorded");
    expect(noData.incident!.state).toBe("open");
    const res = await h.app.call("GET", `/o/${OWNER.org}/incidents/${opened.incident!.id}`, { token: h.token });
    expect(res.body.state).toBe("open");
    expect(res.body.timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened", "recovery", "no_data"]);
  });

  it("ignores a recovery or no-data notice whose event id the incident already holds", async () => {
    const id = identity("held");
    const opened = await record(alert({ attachIdentity: id, eventId: "a1" }));
    await record(alert({ attachIdentity: id, eventId: "r1", kind: "recovery" }));
    const again = await record(alert({ attachIdentity: id, eventId: "r1", kind: "recovery" }));
    const noDataWithAlertEvent = await record(alert({ attachIdentity: id, eventId: "a1", kind: "no_data" }));
    expect(again.outcome).toBe("ignored");
    expect(again.incident).toBeUndefined();
    expect(again.reason).toBe("this event identifier is already recorded on the open incident");
    expect(noDataWithAlertEvent.outcome).toBe("ignored");
    expect((await timelineOf(opened.incident!.id)).map((e) => e.kind)).toEqual(["opened", "recovery"]);
  });

  it("ignores a recovery, no-data notice or resume with no open incident, and opens nothing", async () => {
    const id = identity("nothing-open");
    for (const kind of ["recovery", "no_data", "resumed"]) {
      const res = await record(alert({ attachIdentity: id, eventId: `x-${kind}`, kind }));
      expect(res.outcome).toBe("ignored");
      expect(res.reason).toBe("no open incident for this attach identity");
      expect(res.incident).toBeUndefined();
    }
    const noIdentity = await record(alert({ attachIdentity: "", kind: "recovery" }));
    expect(noIdentity.outcome).toBe("ignored");
    // And an alert for the identity afterwards still opens: nothing was left behind.
    expect((await record(alert({ attachIdentity: id, eventId: "x-alert" }))).outcome).toBe("opened");
  });

  it("records a heartbeat's resume on its open incident", async () => {
    const id = `heartbeat:nightly-backup:${++sequence}`;
    const opened = await record(alert({ attachIdentity: id, source: "heartbeat", title: "Heartbeat nightly-backup silent for 2h", severity: "sev2" }));
    const resumed = await record(alert({ attachIdentity: id, source: "heartbeat", kind: "resumed", title: "", severity: "" }));
    expect(resumed.outcome).toBe("recorded");
    expect(resumed.incident!.id).toBe(opened.incident!.id);
    expect((await timelineOf(opened.incident!.id)).map((e) => e.kind)).toEqual(["opened", "resumed"]);
  });

  it("opens a new incident for the next alert after a person resolves or archives the incident", async () => {
    const id = identity("after-resolve");
    const first = await record(alert({ attachIdentity: id, eventId: "1" }));
    expect((await h.app.call("POST", `/o/${OWNER.org}/incidents/${first.incident!.id}/resolve`, { token: h.token })).status).toBe(200);
    // A recovery after the resolve finds no open incident.
    expect((await record(alert({ attachIdentity: id, eventId: "r", kind: "recovery" }))).outcome).toBe("ignored");
    // The same event id as the resolved incident's: held by that incident, not by a new one.
    const second = await record(alert({ attachIdentity: id, eventId: "1" }));
    expect(second.outcome).toBe("opened");
    expect(second.incident!.id).not.toBe(first.incident!.id);
    expect((await h.app.call("POST", `/o/${OWNER.org}/incidents/${second.incident!.id}/archive`, { token: h.token })).status).toBe(200);
    const third = await record(alert({ attachIdentity: id, eventId: "2" }));
    expect(third.outcome).toBe("opened");
    expect(new Set([first.incident!.id, second.incident!.id, third.incident!.id]).size).toBe(3);
  });

  it("keeps identities of different organizations apart", async () => {
    const id = identity("orgs");
    const mine = await record(alert({ attachIdentity: id }));
    const otherOrgId = "00000000-0000-4000-8000-000000000001";
    const theirs = await h.client.record({ orgId: otherOrgId, orgSlug: "other", alert: alert({ attachIdentity: id }) });
    expect(mine.outcome).toBe("opened");
    expect(theirs.outcome).toBe("opened");
    expect(theirs.incident!.workspaceUrl).toContain("/o/other/incidents/");
  });

  it("refuses a malformed delivery with InvalidArgument and stores nothing", async () => {
    const cases: [AlertInit, string][] = [
      [{ source: "Pager Duty" }, "alert.source: does not match regex pattern"],
      [{ kind: "resolve" }, "alert.kind must be one of"],
      [{ severity: "critical" }, "alert.severity must be one of"],
      [{ title: "   " }, "alert.title is required"],
      [{ attachIdentity: "x".repeat(2000) }, "alert.attachIdentity must be at most 1024 bytes"],
    ];
    for (const [init, message] of cases) {
      const err = await record(alert({ attachIdentity: identity("bad"), ...init })).catch((e: unknown) => ConnectError.from(e));
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toContain(message);
    }
    const noOrg = await h.client
      .record({ orgId: "acme", orgSlug: OWNER.org, alert: alert({ attachIdentity: "x" }) })
      .catch((e: unknown) => ConnectError.from(e));
    expect((noOrg as ConnectError).code).toBe(Code.InvalidArgument);
  });

  it("keeps a NUL character from failing the delivery", async () => {
    const res = await record(alert({ attachIdentity: identity("nul"), title: "bad\u0000title", data: { "k\u0000": "v\u0000" } }));
    expect(res.outcome).toBe("opened");
    expect(res.incident!.title).toBe("bad\uFFFDtitle");
  });

  it("writes each event with the database's time and the incident the statement decided", async () => {
    const id = identity("events");
    const occurredAt = new Date("0001-01-01T00:00:00.123Z");
    const opened = await record(alert({ attachIdentity: id, eventId: "o1", occurredAt: timestampFromDate(occurredAt) }));
    const repeat = await record(alert({ attachIdentity: id, eventId: "o2" }));
    const recovery = await record(alert({ attachIdentity: id, eventId: "o3", kind: "recovery" }));
    expect([opened.outcome, repeat.outcome, recovery.outcome]).toEqual(["opened", "attached", "recorded"]);
    const incidentId = opened.incident!.id;
    const sql = postgres(h.app.databaseUrl, { max: 1, onnotice: () => {} });
    try {
      // The stored times to the microsecond, as seconds (floor) and nanoseconds.
      const [incident] = await sql<{ s: string; ns: string }[]>`
        select floor(extract(epoch from opened_at))::bigint::text as s, ((extract(microseconds from opened_at)::bigint % 1000000) * 1000)::text as ns
        from incidents.incidents where id = ${incidentId}`;
      const entries = await sql<{ kind: string; s: string; ns: string }[]>`
        select kind, floor(extract(epoch from at))::bigint::text as s, ((extract(microseconds from at)::bigint % 1000000) * 1000)::text as ns
        from incidents.timeline_entries where incident_id = ${incidentId} order by id`;
      const rows = await sql<{ subject: string; payload: Buffer }[]>`select subject, payload from incidents.outbox_tap order by seq`;
      const openedEvents = rows
        .filter((r) => r.subject === "events.incident.opened")
        .map((r) => fromBinary(IncidentOpenedSchema, new Uint8Array(r.payload)))
        .filter((e) => e.incidentId === incidentId);
      expect(openedEvents).toHaveLength(1);
      expect(openedEvents[0]).toMatchObject({ orgId: h.orgId, title: "High CPU on checkout", severity: "sev2", source: "metrics-monitor" });
      expect([String(openedEvents[0]!.at!.seconds), String(openedEvents[0]!.at!.nanos)]).toEqual([incident!.s, incident!.ns]);
      const recorded = rows
        .filter((r) => r.subject === "events.incident.timeline_recorded")
        .map((r) => fromBinary(TimelineRecordedSchema, new Uint8Array(r.payload)))
        .filter((e) => e.incidentId === incidentId);
      expect(recorded.map((e) => [e.orgId, e.kind, String(e.at!.seconds), String(e.at!.nanos)]).sort()).toEqual(
        entries.map((e) => [h.orgId, e.kind, e.s, e.ns]).sort(),
      );
      // Year 1: negative seconds since the epoch, non-negative nanoseconds.
      expect(entries[0]).toMatchObject({ kind: "opened", s: "-62135596800", ns: "123000000" });
    } finally {
      await sql.end();
    }
  });

  it("encodes a timestamp field in SQL byte for byte as the process does", async () => {
    const sql = postgres(h.app.databaseUrl, { max: 1, onnotice: () => {} });
    try {
      const dates = [
        "1970-01-01T00:00:00.000Z",
        "1970-01-01T00:00:00.001Z",
        "1969-12-31T23:59:59.999Z",
        "1969-12-31T23:59:59.000Z",
        "0001-01-01T00:00:00.000Z",
        "0001-01-01T00:00:00.123Z",
        "2024-06-12T10:05:44.312Z",
        "2038-01-19T03:14:08.000Z",
        "9999-12-31T23:59:59.999Z",
      ];
      for (const text of dates) {
        const at = new Date(text);
        const [row] = await sql<{ field: Buffer }[]>`select incidents.pb_timestamp_field(4, ${at}::timestamptz) as field`;
        const expected = toBinary(TimelineRecordedSchema, create(TimelineRecordedSchema, { at: timestampFromDate(at) }));
        expect(Buffer.from(row!.field).toString("hex"), text).toBe(Buffer.from(expected).toString("hex"));
      }
      for (const text of ["zürich ✓", "", "x".repeat(300)]) {
        const [row] = await sql<{ field: Buffer }[]>`select incidents.pb_string_field(2, ${text}) as field`;
        const expected = toBinary(TimelineRecordedSchema, create(TimelineRecordedSchema, { incidentId: text }));
        // protobuf-es leaves an empty string out; a field written empty is read as empty all the same.
        if (text === "") expect(Buffer.from(row!.field).toString("hex")).toBe("1200");
        else expect(Buffer.from(row!.field).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
      }
      // Negative values: ten bytes of two's complement, as protobuf-es writes an int64.
      const [negative] = await sql<{ v: Buffer }[]>`select incidents.pb_varint(-1) as v`;
      expect(Buffer.from(negative!.v).toString("hex")).toBe("ffffffffffffffffff01");
    } finally {
      await sql.end();
    }
  });

  it("200 concurrent identical deliveries: exactly 1 opened and 199 attached, one timeline entry", async () => {
    const a = alert({ attachIdentity: identity("burst-same"), eventId: "same-event" });
    const results = await Promise.all(Array.from({ length: 200 }, () => record(a)));
    const outcomes = results.map((r) => r.outcome);
    expect(outcomes.filter((o) => o === "opened")).toHaveLength(1);
    expect(outcomes.filter((o) => o === "attached")).toHaveLength(199);
    const ids = new Set(results.map((r) => r.incident!.id));
    expect(ids.size).toBe(1);
    expect(await timelineOf([...ids][0]!)).toHaveLength(1);
  });

  it("200 concurrent deliveries with distinct event ids: 1 opened, 199 attached, 200 timeline entries", async () => {
    const attachIdentity = identity("burst-distinct");
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => record(alert({ attachIdentity, eventId: `evt-${i}` }))));
    const outcomes = results.map((r) => r.outcome);
    expect(outcomes.filter((o) => o === "opened")).toHaveLength(1);
    expect(outcomes.filter((o) => o === "attached")).toHaveLength(199);
    const ids = new Set(results.map((r) => r.incident!.id));
    expect(ids.size).toBe(1);
    const timeline = await timelineOf([...ids][0]!);
    expect(timeline).toHaveLength(200);
    expect(timeline[0]!.kind).toBe("opened");
    expect(timeline.slice(1).every((e) => e.kind === "repeat")).toBe(true);
    expect(new Set(timeline.map((e) => e.eventId)).size).toBe(200);
  });

  it("RecordMany decides what its batch path leaves to Record per identity in request order, and answers a refused delivery with Record's code", async () => {
    const busy = identity("many-ordered");
    const alone = identity("many-alone");
    const { results, errors } = await h.client.recordMany({
      deliveries: [
        // Two deliveries of one identity: the first opens, the second (left to Record) attaches to it, then a recovery.
        { orgId: h.orgId, orgSlug: OWNER.org, alert: alert({ attachIdentity: busy, eventId: "many-1" }), requestId: "req-many-1" },
        { orgId: h.orgId, orgSlug: OWNER.org, alert: alert({ attachIdentity: busy, eventId: "many-2" }), requestId: "req-many-2" },
        { orgId: h.orgId, orgSlug: OWNER.org, alert: alert({ attachIdentity: busy, eventId: "many-3", kind: "recovery", title: "", severity: "" }) },
        // Record refuses what its own checks judge: an alert without a title.
        { orgId: h.orgId, orgSlug: OWNER.org, alert: alert({ attachIdentity: alone, eventId: "many-4", title: " " }) },
      ],
    });
    expect(results.slice(0, 3).map((r) => r.outcome)).toEqual(["opened", "attached", "recorded"]);
    expect(new Set(results.slice(0, 3).map((r) => r.incident?.id)).size).toBe(1);
    expect(Object.keys(errors)).toEqual(["3"]);
    expect(errors[3]).toMatch(/^\[invalid_argument\] /);
    const timeline = await timelineOf(results[0]!.incident!.id);
    expect(timeline.map((e) => e.eventId)).toEqual(["many-1", "many-2", "many-3"]);
  });
});

describe("Record across three processes over NATS", () => {
  const processes: RunningProcess[] = [];
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let nc: NatsConnection;
  let client: Client<typeof IncidentsService>;
  let orgId: string;
  let db: postgres.Sql;
  let natsServer: PrivateNats;

  beforeAll(async () => {
    natsServer = await startPrivateNats();
    database = await freshDatabase();
    // One after another: the process under test is Record, not start-up.
    for (let i = 0; i < 3; i++) {
      processes.push(
        await runProcess({
          name: `incidents-${i}`,
          services: [createIdentityService, createIncidentsService],
          gateway: false,
          env: {
            DATABASE_URL: database.url,
            DATABASE_POOL_SIZE: "4",
            NATS_URL: natsServer.url,
            PORT: "0",
            HOST: "127.0.0.1",
            LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "silent",
            BOOTSTRAP_ORG_SLUG: OWNER.org,
            BOOTSTRAP_OWNER_EMAIL: OWNER.email,
            BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
            SHUTDOWN_GRACE_SECONDS: "1",
          },
        }),
      );
    }
    // The caller is none of them: its calls go over NATS to the queue group the three share.
    nc = await connect({ servers: natsServer.url, name: "incidents-test-caller" });
    const transport = createNatsTransport(nc);
    client = createClient(IncidentsService, transport);
    orgId = (await createClient(IdentityService, transport).getOrganization({ slug: OWNER.org })).id;
    db = postgres(database.url, { max: 1, onnotice: () => {} });
  });

  afterAll(async () => {
    await db?.end();
    await nc?.drain();
    for (const p of processes) await p.stop();
    await natsServer?.cleanup();
    await database?.drop();
  });

  const record = (a: Alert) => client.record({ orgId, orgSlug: OWNER.org, alert: a });
  const entriesOf = async (incidentId: string) =>
    (await db<{ n: number }[]>`select count(*)::int as n from incidents.timeline_entries where incident_id = ${incidentId}`)[0]!.n;

  it("200 concurrent identical deliveries converge to 1 opened + 199 attached and one timeline entry", async () => {
    const a = alert({ attachIdentity: identity("replicas-same"), eventId: "one-event" });
    const results = await Promise.all(Array.from({ length: 200 }, () => record(a)));
    expect(results.filter((r) => r.outcome === "opened")).toHaveLength(1);
    expect(results.filter((r) => r.outcome === "attached")).toHaveLength(199);
    const ids = new Set(results.map((r) => r.incident!.id));
    expect(ids.size).toBe(1);
    expect(await entriesOf([...ids][0]!)).toBe(1);
    const [open] = await db<{ n: number }[]>`select count(*)::int as n from incidents.incidents where attach_identity = ${a.attachIdentity}`;
    expect(open!.n).toBe(1);
  });

  it("200 concurrent deliveries with distinct event ids converge to 1 opened + 199 attached and 200 entries", async () => {
    const attachIdentity = identity("replicas-distinct");
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => record(alert({ attachIdentity, eventId: `e-${i}` }))));
    expect(results.filter((r) => r.outcome === "opened")).toHaveLength(1);
    expect(results.filter((r) => r.outcome === "attached")).toHaveLength(199);
    const ids = new Set(results.map((r) => r.incident!.id));
    expect(ids.size).toBe(1);
    expect(await entriesOf([...ids][0]!)).toBe(200);
    const [held] = await db<{ n: number }[]>`
      select count(distinct event_id)::int as n from incidents.timeline_entries where incident_id = ${[...ids][0]!} and event_id is not null`;
    expect(held!.n).toBe(200);
  });
});
