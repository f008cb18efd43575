import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { IncidentSchema, type RecordManyRequest, type RecordRequest, RecordResponseSchema } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { failWith, serveUnderTest, STUB_TOKEN, stubPeers, stubPrincipal, type StubPeers, codeOf } from "../../test/support/stub-peers.js";
import { createLogger } from "../runtime/observability/logger.js";
import { createSecretBox } from "../runtime/credentials/secret-box.js";
import { AUDIT_KINDS, createRegistryHandlers } from "./registry.js";
import { createSilenceDelivery, silenceEventId } from "./silence-delivery.js";
import { createSweeper } from "./sweep.js";
import { createMemoryHeartbeatStore, type MemoryHeartbeatStore } from "./testing/memory-store.js";

/**
 * The management routes, the sweep and the silence deliveries, over an in-memory store and stub
 * peers: the rules at the handler level, and what happens when the identity service or the
 * incident core answers with an error. The Postgres store is covered by the end-to-end suites.
 */

const ORG = stubPrincipal().orgSlug;
const auth = { headers: { authorization: `Bearer ${STUB_TOKEN}` } };
/** A peer that is down, and one too slow to answer in time. */
const PEER_FAILURES: [string, Code][] = [
  ["Unavailable", Code.Unavailable],
  ["DeadlineExceeded", Code.DeadlineExceeded],
];
const logger = createLogger("silent", "heartbeats-unit");

interface Harness {
  store: MemoryHeartbeatStore;
  peers: StubPeers;
  client: Client<typeof HeartbeatsService>;
  pokes: number;
}

function harness(role = "owner"): Harness {
  const store = createMemoryHeartbeatStore();
  const peers = stubPeers({ principal: stubPrincipal({ role }) });
  const h: Harness = { store, peers, client: undefined!, pokes: 0 };
  const outbox = { poke: () => void h.pokes++ };
  const delivery = createSilenceDelivery({ store, clients: peers.clients, logger });
  const sweeper = createSweeper({ store, outbox, delivery, logger });
  const box = createSecretBox([{ id: "test", key: randomBytes(32) }]);
  const pingUrls = { box: () => box, publicUrl: () => "https://warroom.example" };
  const transport = serveUnderTest((router) => {
    router.service(HeartbeatsService, {
      ...createRegistryHandlers({ store, clients: peers.clients, outbox, pingUrls }),
      sweep: () => sweeper.sweep(),
    });
  });
  h.client = createClient(HeartbeatsService, transport);
  return h;
}

/** An incident core that opens one incident per delivery and keeps what it was sent. */
function healthyIncidents(peers: StubPeers): { alerts: RecordRequest[]; resumes: RecordRequest[] } {
  const seen = { alerts: [] as RecordRequest[], resumes: [] as RecordRequest[] };
  const opened = (req: RecordRequest) =>
    create(RecordResponseSchema, { outcome: "opened", incident: create(IncidentSchema, { id: `incident-for-${req.alert?.eventId}` }) });
  peers.incidents.recordMany = (req: RecordManyRequest) => {
    seen.alerts.push(...req.deliveries);
    return { results: req.deliveries.map(opened), errors: {} };
  };
  peers.incidents.record = (req: RecordRequest) => {
    seen.resumes.push(req);
    return opened(req);
  };
  return seen;
}

describe("heartbeat registry, at the handler level", () => {
  let h: Harness;
  beforeEach(() => {
    h = harness();
  });

  it("an interval heartbeat is due one interval plus grace after it is registered, and its registration is audited", async () => {
    const registered = await h.client.registerHeartbeat({ org: ORG, name: "backup", expectedIntervalSeconds: 300, graceSeconds: 60 }, auth);
    expect(timestampDate(registered.dueAt!).toISOString()).toBe(new Date(h.store.now().getTime() + 360_000).toISOString());
    expect(timestampDate(registered.nextExpectedAt!).toISOString()).toBe(new Date(h.store.now().getTime() + 300_000).toISOString());
    expect(registered.status).toBe("ok");
    expect(h.store.audits).toEqual([
      {
        orgId: stubPrincipal().orgId,
        kind: AUDIT_KINDS.registered,
        actor: stubPrincipal().email,
        data: { name: "backup", graceSeconds: 60, expectedIntervalSeconds: 300 },
      },
    ]);
    expect(h.pokes).toBe(1);
    expect((await h.client.getHeartbeat({ org: ORG, name: "backup" }, auth)).name).toBe("backup");
  });

  it("a scheduled heartbeat is due at the next scheduled time in its time zone plus grace", async () => {
    // 10:00 UTC is 11:00 in Berlin (winter time): the next 03:00 there is 02:00 UTC the next day.
    const registered = await h.client.registerHeartbeat(
      { org: ORG, name: "nightly", schedule: "0 3 * * *", timezone: "Europe/Berlin", graceSeconds: 600 },
      auth,
    );
    expect(timestampDate(registered.dueAt!).toISOString()).toBe("2026-03-03T02:10:00.000Z");
    expect(registered.schedule).toBe("0 3 * * *");
    expect(registered.timezone).toBe("Europe/Berlin");
  });

  it("refuses what breaks the rules, and writes nothing", async () => {
    const refusals = [
      { org: ORG, name: "both", expectedIntervalSeconds: 60, schedule: "@hourly", graceSeconds: 60 },
      { org: ORG, name: "zone", expectedIntervalSeconds: 60, timezone: "Europe/Berlin", graceSeconds: 60 },
      { org: ORG, name: "no-grace", expectedIntervalSeconds: 60 },
      { org: ORG, name: "Upper", expectedIntervalSeconds: 60, graceSeconds: 60 },
      { org: ORG, name: "too-long", expectedIntervalSeconds: 32 * 86_400, graceSeconds: 60 },
      { org: ORG, name: "bad-cron", schedule: "0 3 * *", graceSeconds: 60 },
      { org: ORG, name: "bad-zone", schedule: "@daily", timezone: "Mars/Olympus", graceSeconds: 60 },
    ];
    for (const req of refusals) expect(await codeOf(h.client.registerHeartbeat(req, auth)), req.name).toBe(Code.InvalidArgument);
    expect(h.store.heartbeats).toHaveLength(0);
    expect(h.store.audits).toHaveLength(0);
  });

  it("a second heartbeat of the same name is AlreadyExists", async () => {
    await h.client.registerHeartbeat({ org: ORG, name: "backup", expectedIntervalSeconds: 60, graceSeconds: 60 }, auth);
    expect(await codeOf(h.client.registerHeartbeat({ org: ORG, name: "backup", expectedIntervalSeconds: 120, graceSeconds: 60 }, auth))).toBe(
      Code.AlreadyExists,
    );
    expect(h.store.audits).toHaveLength(1);
  });

  it("an update moves the deadline from the last ping (or registration) with the new interval and grace", async () => {
    await h.client.registerHeartbeat({ org: ORG, name: "backup", expectedIntervalSeconds: 300, graceSeconds: 60 }, auth);
    const registeredAt = h.store.now().getTime();
    h.store.advance(100);
    const updated = await h.client.updateHeartbeat({ org: ORG, heartbeat: "backup", expectedIntervalSeconds: 600, graceSeconds: 120 }, auth);
    expect(timestampDate(updated.dueAt!).getTime()).toBe(registeredAt + 720_000);
    expect(h.store.audits.map((a) => a.kind)).toEqual([AUDIT_KINDS.registered, AUDIT_KINDS.updated]);
  });

  it("an interval heartbeat switched to a schedule loses its interval; a time zone alone on it is refused and changes nothing", async () => {
    await h.client.registerHeartbeat({ org: ORG, name: "backup", expectedIntervalSeconds: 300, graceSeconds: 60 }, auth);
    expect(await codeOf(h.client.updateHeartbeat({ org: ORG, heartbeat: "backup", timezone: "Europe/Berlin" }, auth))).toBe(Code.InvalidArgument);
    expect(h.store.heartbeats[0]!.interval).toBe(300);
    expect(h.store.audits).toHaveLength(1);
    const updated = await h.client.updateHeartbeat({ org: ORG, heartbeat: "backup", schedule: "@hourly" }, auth);
    expect(updated.expectedIntervalSeconds).toBe(0);
    expect(updated.schedule).toBe("@hourly");
    expect(timestampDate(updated.dueAt!).toISOString()).toBe("2026-03-02T11:01:00.000Z");
  });

  it("a rename, an empty update and both interval and schedule are refused", async () => {
    await h.client.registerHeartbeat({ org: ORG, name: "backup", expectedIntervalSeconds: 300, graceSeconds: 60 }, auth);
    expect(await codeOf(h.client.updateHeartbeat({ org: ORG, heartbeat: "backup", name: "other", graceSeconds: 5 }, auth))).toBe(Code.InvalidArgument);
    expect(await codeOf(h.client.updateHeartbeat({ org: ORG, heartbeat: "backup" }, auth))).toBe(Code.InvalidArgument);
    expect(await codeOf(h.client.updateHeartbeat({ org: ORG, heartbeat: "backup", expectedIntervalSeconds: 60, schedule: "@daily" }, auth))).toBe(
      Code.InvalidArgument,
    );
  });

  it("an unknown heartbeat is NotFound to read, update and delete", async () => {
    expect(await codeOf(h.client.getHeartbeat({ org: ORG, name: "nope" }, auth))).toBe(Code.NotFound);
    expect(await codeOf(h.client.updateHeartbeat({ org: ORG, heartbeat: "nope", graceSeconds: 5 }, auth))).toBe(Code.NotFound);
    expect(await codeOf(h.client.deleteHeartbeat({ org: ORG, name: "nope" }, auth))).toBe(Code.NotFound);
    expect(h.store.audits).toHaveLength(0);
  });

  it("lists by name a page at a time", async () => {
    for (const name of ["c", "a", "b"]) await h.client.registerHeartbeat({ org: ORG, name, expectedIntervalSeconds: 60, graceSeconds: 60 }, auth);
    const first = await h.client.listHeartbeats({ org: ORG, limit: 2 }, auth);
    expect(first.heartbeats.map((x) => x.name)).toEqual(["a", "b"]);
    const second = await h.client.listHeartbeats({ org: ORG, limit: 2, cursor: first.nextCursor! }, auth);
    expect(second.heartbeats.map((x) => x.name)).toEqual(["c"]);
    expect(second.nextCursor).toBeUndefined();
  });

  it("a member may read but not register", async () => {
    const member = harness("member");
    expect(await codeOf(member.client.registerHeartbeat({ org: ORG, name: "x", expectedIntervalSeconds: 60, graceSeconds: 60 }, auth))).toBe(
      Code.PermissionDenied,
    );
    expect((await member.client.listHeartbeats({ org: ORG }, auth)).heartbeats).toEqual([]);
  });
});

describe("heartbeat routes when the identity service fails", () => {
  it("an organization identity does not know is NotFound, and nothing is written", async () => {
    const h = harness();
    expect(await codeOf(h.client.registerHeartbeat({ org: "other", name: "x", expectedIntervalSeconds: 60, graceSeconds: 60 }, auth))).toBe(Code.NotFound);
    expect(await codeOf(h.client.listHeartbeats({ org: "other" }, auth))).toBe(Code.NotFound);
    expect(h.store.heartbeats).toHaveLength(0);
  });

  it("no credential is Unauthenticated without asking identity", async () => {
    const h = harness();
    h.peers.identity.authenticate = failWith(Code.Internal, "identity must not be asked");
    expect(await codeOf(h.client.listHeartbeats({ org: ORG }))).toBe(Code.Unauthenticated);
  });

  it.each(PEER_FAILURES)("identity answering %s is passed on, and nothing is written", async (_, code) => {
    const h = harness();
    h.peers.identity.authenticate = failWith(code);
    expect(await codeOf(h.client.registerHeartbeat({ org: ORG, name: "x", expectedIntervalSeconds: 60, graceSeconds: 60 }, auth))).toBe(code);
    expect(h.store.heartbeats).toHaveLength(0);
  });
});

describe("the sweep hands silences to the incident core", () => {
  let h: Harness;
  beforeEach(async () => {
    h = harness();
    await h.client.registerHeartbeat({ org: ORG, name: "backup", expectedIntervalSeconds: 300, graceSeconds: 60 }, auth);
  });

  it("nothing is silent before the deadline; once past it, one alert opens an incident, and the next sweep sends nothing again", async () => {
    const seen = healthyIncidents(h.peers);
    h.store.advance(359);
    expect(await h.client.sweep({})).toMatchObject({ silent: 0, delivered: 0 });
    h.store.advance(2);
    expect(await h.client.sweep({})).toMatchObject({ silent: 1, opened: 1, delivered: 1, failed: 0 });
    const silence = h.store.silences[0]!;
    expect(seen.alerts.map((a) => a.alert?.eventId)).toEqual([silenceEventId(silence.id)]);
    expect(seen.alerts[0]!.alert).toMatchObject({
      source: "heartbeat",
      attachIdentity: "heartbeat:backup",
      kind: "alert",
      title: "Heartbeat backup went silent",
    });
    expect(silence.incidentId).toBe(`incident-for-${silenceEventId(silence.id)}`);
    expect(h.store.silentEvents).toEqual(["backup"]);
    expect(h.pokes).toBe(2);
    h.store.advance(60);
    expect(await h.client.sweep({})).toMatchObject({ silent: 0, delivered: 0, failed: 0 });
    expect(seen.alerts).toHaveLength(1);
  });

  it.each(PEER_FAILURES)("RecordMany answering %s leaves the silence pending, and the next sweep delivers it under the same event id", async (_, code) => {
    h.peers.incidents.recordMany = failWith(code);
    h.store.advance(400);
    expect(await h.client.sweep({})).toMatchObject({ silent: 1, delivered: 0, failed: 1 });
    const silence = h.store.silences[0]!;
    expect(silence.alertRecordedAt).toBeNull();
    // Released: the lease ends now, not after its full length.
    expect(silence.claimUntil!.getTime()).toBe(h.store.now().getTime());

    const seen = healthyIncidents(h.peers);
    h.store.advance(1);
    expect(await h.client.sweep({})).toMatchObject({ silent: 0, delivered: 1, opened: 1, failed: 0 });
    expect(seen.alerts.map((a) => a.alert?.eventId)).toEqual([silenceEventId(silence.id)]);
    expect(silence.alertRecordedAt).not.toBeNull();
  });

  it("a silence the incident core refuses by itself in RecordMany stays pending while the others are delivered", async () => {
    await h.client.registerHeartbeat({ org: ORG, name: "cleanup", expectedIntervalSeconds: 300, graceSeconds: 60 }, auth);
    h.peers.incidents.recordMany = (req: RecordManyRequest) => ({
      results: req.deliveries.map((_, i) => (i === 0 ? create(RecordResponseSchema) : create(RecordResponseSchema, { outcome: "opened" }))),
      errors: { 0: "refused" },
    });
    h.store.advance(400);
    expect(await h.client.sweep({})).toMatchObject({ silent: 2, delivered: 1, failed: 1 });
    expect(h.store.silences.filter((s) => s.alertRecordedAt === null)).toHaveLength(1);
  });

  it("a resume waits for its alert, and Record failing leaves it pending for the next sweep", async () => {
    h.peers.incidents.recordMany = failWith(Code.Unavailable);
    h.store.advance(400);
    await h.client.sweep({});
    h.store.endSilence("backup");
    const seen = healthyIncidents(h.peers);
    h.peers.incidents.record = failWith(Code.DeadlineExceeded);
    h.store.advance(1);
    // The alert goes now; its resume fails.
    expect(await h.client.sweep({})).toMatchObject({ delivered: 1, resumed: 0, failed: 1 });
    expect(h.store.silences[0]!.resumeRecordedAt).toBeNull();

    h.peers.incidents.record = (req: RecordRequest) => {
      seen.resumes.push(req);
      return create(RecordResponseSchema, { outcome: "recorded" });
    };
    h.store.advance(1);
    expect(await h.client.sweep({})).toMatchObject({ delivered: 0, resumed: 1, failed: 0 });
    expect(seen.resumes.map((r) => r.alert?.kind)).toEqual(["resumed"]);
    expect(h.store.silences[0]!.resumeOutcome).toBe("recorded");
  });

  it("an alert a maintenance window suppressed is offered again when the window ends while still silent", async () => {
    const windowEnds = new Date(h.store.now().getTime() + 600_000);
    h.peers.incidents.recordMany = (req: RecordManyRequest) => ({
      results: req.deliveries.map(() => create(RecordResponseSchema, { outcome: "suppressed", maintenanceWindowId: "window-1" })),
      errors: {},
    });
    h.peers.incidents.getMaintenanceWindowEnd = () => ({ endsAt: timestampFromDate(windowEnds), now: timestampFromDate(h.store.now()) });
    h.store.advance(400);
    expect(await h.client.sweep({})).toMatchObject({ silent: 1, suppressed: 1 });
    const silence = h.store.silences[0]!;
    expect(silence.suppressedUntil!.getTime()).toBe(windowEnds.getTime());
    // Within the window, a recheck asks only when the window ends.
    h.store.advance(150);
    expect(await h.client.sweep({})).toMatchObject({ delivered: 0, failed: 0 });

    const seen = healthyIncidents(h.peers);
    h.store.advance(300);
    expect(await h.client.sweep({})).toMatchObject({ delivered: 1, opened: 1 });
    expect(seen.alerts[0]!.alert?.summary).toContain("maintenance window (window-1)");
  });
});
