import { fromBinary } from "@bufbuild/protobuf";
import { createClient, type Client } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { HeartbeatSilentSchema } from "../../gen/warroom/events/v1/events_pb.js";
import type { HeartbeatsService, SweepResponse } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { startApp, type TestApp } from "../../test/support/app.js";
import { tapOutbox } from "../../test/support/outbox-tap.js";
import { castOf, heartbeatsClient, ping, type Cast } from "./testing/kit.js";

// Three processes share one database and sweep at the same moment; replicas that die mid-sweep
// are stood in for by the state they leave behind. The periodic sweep is set far away so that
// every sweep here is one the test asks for.

let apps: TestApp[] = [];
let sweepers: Client<typeof HeartbeatsService>[] = [];
let cast: Cast;
let db: postgres.Sql;

beforeAll(async () => {
  const env = { HEARTBEAT_SWEEP_SECONDS: "3600" };
  const first = await startApp({ env });
  apps = [first, await startApp({ env, databaseUrl: first.databaseUrl }), await startApp({ env, databaseUrl: first.databaseUrl })];
  sweepers = apps.map((app) => heartbeatsClient(app.process.transport));
  cast = await castOf(first);
  db = postgres(first.databaseUrl, { max: 2, onnotice: () => {} });
  await tapOutbox(db, "heartbeats");
});

afterAll(async () => {
  await db?.end();
  // The first app owns the database: stop it last.
  for (const app of [...apps].reverse()) await app.stop();
});

/** One sweep on each of the three processes at the same moment, summed. */
async function sweepEverywhere(): Promise<Pick<SweepResponse, "silent" | "opened" | "delivered" | "suppressed" | "resumed" | "failed">> {
  const results = await Promise.all(sweepers.map((s) => s.sweep({})));
  const sum = { silent: 0, opened: 0, delivered: 0, suppressed: 0, resumed: 0, failed: 0 };
  for (const r of results) {
    sum.silent += r.silent;
    sum.opened += r.opened;
    sum.delivered += r.delivered;
    sum.suppressed += r.suppressed;
    sum.resumed += r.resumed;
    sum.failed += r.failed;
  }
  return sum;
}

async function heartbeatIncidents(names: string[]): Promise<{ id: string; entity: { id: string } }[]> {
  const res = await apps[1]!.call("GET", "/o/acme/incidents?limit=1000", { token: cast.member });
  expect(res.status).toBe(200);
  return res.body.incidents.filter((i: { source: string; entity: { id: string } | null }) => i.source === "heartbeat" && names.includes(i.entity?.id ?? ""));
}

async function timelineKinds(id: string): Promise<string[]> {
  const res = await apps[2]!.call("GET", `/o/acme/incidents/${id}`, { token: cast.member });
  return res.body.timeline.map((e: { kind: string }) => e.kind);
}

/** What the incident core answered to the `resumed` of the heartbeat's last silence, once it answered. */
async function resumeOutcome(name: string): Promise<string> {
  const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
  for (;;) {
    const [silence] = await db<{ resume_outcome: string | null }[]>`
      select s.resume_outcome from heartbeats.silences s join heartbeats.heartbeats h on h.id = s.heartbeat_id
      where h.name = ${name} order by s.since desc limit 1`;
    if (silence?.resume_outcome) return silence.resume_outcome;
    if (Date.now() > deadline) throw new Error(`the resumed of ${name} was never recorded`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Registers heartbeats due in two seconds and waits until they are overdue. */
async function registerOverdue(names: string[]): Promise<void> {
  let latestDue = 0;
  for (const [i, name] of names.entries()) {
    const app = apps[i % apps.length]!;
    const res = await app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { name, expectedIntervalSeconds: 1, graceSeconds: 1 } });
    expect(res.status).toBe(201);
    latestDue = Math.max(latestDue, Date.parse(res.body.dueAt));
  }
  const now = (await db<{ now: Date }[]>`select now()`)[0]!.now;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, latestDue - now.getTime()) + 100));
}

/** What a sweep leaves behind when its process dies after detecting and claiming a silence. */
async function deadReplicaClaim(name: string, leaseSeconds: number): Promise<string> {
  const [row] = await db<{ id: string }[]>`
    with due as (
      select id, deadline, coalesce(last_seen_at, created_at) as since, last_seen_at is null as never_pinged
      from heartbeats.heartbeats where name = ${name} and open_silence_id is null for update
    ), s as (
      insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged, claim_token, claim_until)
      select id, deadline, since, never_pinged, gen_random_uuid(), now() + make_interval(secs => ${leaseSeconds}) from due
      returning id, heartbeat_id
    )
    update heartbeats.heartbeats h set open_silence_id = s.id from s where h.id = s.heartbeat_id returning s.id`;
  return row!.id;
}

describe("sweeping from three processes", () => {
  it("opens exactly one incident per silence when three processes sweep at the same moment, again and again", async () => {
    const names = Array.from({ length: 24 }, (_, i) => `replicated-${i}`);
    await registerOverdue(names);
    const rounds = [];
    for (let round = 0; round < 4; round++) rounds.push(await sweepEverywhere());
    const total = rounds.reduce((a, r) => ({ silent: a.silent + r.silent, opened: a.opened + r.opened, failed: a.failed + r.failed }), {
      silent: 0,
      opened: 0,
      failed: 0,
    });
    expect(total).toEqual({ silent: names.length, opened: names.length, failed: 0 });
    const incidents = await heartbeatIncidents(names);
    expect(incidents).toHaveLength(names.length);
    expect(new Set(incidents.map((i) => i.entity.id)).size).toBe(names.length);
    for (const incident of incidents.slice(0, 5)) expect(await timelineKinds(incident.id)).toEqual(["opened"]);
    // One silence row and one domain event per silence.
    const [{ silences }] = await db<[{ silences: number }]>`
      select count(*)::int as silences from heartbeats.silences s join heartbeats.heartbeats h on h.id = s.heartbeat_id where h.name like 'replicated-%'`;
    expect(silences).toBe(names.length);
    const [counts] = await db<{ events: number; all_silences: number }[]>`
      select (select count(*)::int from heartbeats.outbox_tap where subject = 'events.heartbeat.silent') as events,
             (select count(*)::int from heartbeats.silences) as all_silences`;
    expect(counts!.events).toBe(counts!.all_silences);
    const [event] = await db<{ payload: Buffer }[]>`select payload from heartbeats.outbox_tap where subject = 'events.heartbeat.silent' limit 1`;
    const silent = fromBinary(HeartbeatSilentSchema, new Uint8Array(event!.payload));
    expect(silent.name).toMatch(/^replicated-\d+$/);
    expect(silent.silentSeconds).toBeGreaterThanOrEqual(2n);
  });

  it("opens exactly one incident per silence when more silences than one batch are swept by three processes, two batches at a time each", async () => {
    // Over two batches per process: each process hands two to the incident core at once.
    const count = 2600;
    const [org] = await db<{ org_id: string; org_slug: string }[]>`select org_id, org_slug from heartbeats.heartbeats limit 1`;
    await db`
      insert into heartbeats.heartbeats (org_id, org_slug, name, expected_interval_seconds, grace_seconds, created_at, deadline)
      select ${org!.org_id}, ${org!.org_slug}, 'many-' || g, 60, 10, now() - interval '1 hour', now() - interval '1 minute'
      from generate_series(1, ${count}) g`;
    const first = await sweepEverywhere();
    const second = await sweepEverywhere();
    expect(first.silent + second.silent).toBe(count);
    expect(first.opened + second.opened).toBe(count);
    expect(first.failed + second.failed).toBe(0);
    const [counts] = await db<{ incidents: number; identities: number; entries: number; undelivered: number }[]>`
      select count(*)::int as incidents, count(distinct attach_identity)::int as identities,
             (select count(*)::int from incidents.timeline_entries e join incidents.incidents i on i.id = e.incident_id
               where i.attach_identity like 'heartbeat:many-%') as entries,
             (select count(*)::int from heartbeats.silences s join heartbeats.heartbeats h on h.id = s.heartbeat_id
               where h.name like 'many-%' and s.alert_recorded_at is null) as undelivered
      from incidents.incidents where attach_identity like 'heartbeat:many-%'`;
    expect(counts).toEqual({ incidents: count, identities: count, entries: count, undelivered: 0 });
  }, 120_000);

  it("records `resumed` once when the pinged heartbeat's silence is swept by three processes", async () => {
    const names = ["replicated-resume"];
    await registerOverdue(names);
    // It would fall silent again two seconds later and count in the next tests' sweeps, even if
    // this test fails.
    onTestFinished(async () => {
      expect((await apps[0]!.call("DELETE", "/o/acme/heartbeats/replicated-resume", { token: cast.admin })).status).toBe(204);
    });
    expect((await sweepEverywhere()).opened).toBe(1);
    expect((await ping(apps[1]!, "replicated-resume", cast.ingestToken)).status).toBe(204);
    for (let round = 0; round < 3; round++) await sweepEverywhere();
    // The ping's own process records the `resumed` in the background, holding a lease that keeps
    // the sweeps off it; on a busy machine that can outlast three sweeps.
    expect(await resumeOutcome("replicated-resume")).toBe("recorded");
    const [incident] = await heartbeatIncidents(names);
    expect(await timelineKinds(incident!.id)).toEqual(["opened", "resumed"]);
  });
});

describe("a replica killed mid-sweep", () => {
  it("loses nothing when it died after claiming a silence and before Record: the lease expires and another sweep delivers", async () => {
    await registerOverdue(["crashed-before-record"]);
    await deadReplicaClaim("crashed-before-record", 2);
    // While the dead replica's lease holds, nobody else delivers and nobody detects it again.
    expect(await sweepEverywhere()).toMatchObject({ silent: 0, delivered: 0 });
    expect(await heartbeatIncidents(["crashed-before-record"])).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect(await sweepEverywhere()).toMatchObject({ silent: 0, delivered: 1, opened: 1 });
    expect(await heartbeatIncidents(["crashed-before-record"])).toHaveLength(1);
  });

  it("does not double when it died after Record and before marking the silence delivered", async () => {
    await registerOverdue(["crashed-after-record"]);
    const silenceId = await deadReplicaClaim("crashed-after-record", 1);
    const [hb] = await db<{ org_id: string; org_slug: string }[]>`select org_id, org_slug from heartbeats.heartbeats where name = 'crashed-after-record'`;
    // The dead replica's Record went through.
    const incidents = createClient(IncidentsService, apps[0]!.process.transport);
    const first = await incidents.record({
      orgId: hb!.org_id,
      orgSlug: hb!.org_slug,
      alert: {
        source: "heartbeat",
        attachIdentity: "heartbeat:crashed-after-record",
        eventId: `heartbeat-silence:${silenceId}`,
        kind: "alert",
        title: "Heartbeat crashed-after-record went silent",
        severity: "sev2",
        entity: { kind: "heartbeat", id: "crashed-after-record" },
      },
    });
    expect(first.outcome).toBe("opened");
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    // The next sweep repeats the delivery with the same event id: held once, no second incident.
    expect(await sweepEverywhere()).toMatchObject({ delivered: 1, opened: 0 });
    expect(await sweepEverywhere()).toMatchObject({ silent: 0, delivered: 0 });
    const found = await heartbeatIncidents(["crashed-after-record"]);
    expect(found.map((i) => i.id)).toEqual([first.incident!.id]);
    expect(await timelineKinds(first.incident!.id)).toEqual(["opened"]);
  });

  it("delivers the `resumed` of a ping whose process died before recording it", async () => {
    await registerOverdue(["crashed-after-ping"]);
    expect((await sweepEverywhere()).opened).toBe(1);
    // The ping's own write, committed; its process never got to Record.
    await db`
      with hb as (
        select id, open_silence_id from heartbeats.heartbeats where name = 'crashed-after-ping' for update
      ), ended as (
        update heartbeats.silences s set ended_at = now() from hb where s.id = hb.open_silence_id
      )
      update heartbeats.heartbeats h set last_seen_at = now(), deadline = now() + interval '1 hour', open_silence_id = null
      from hb where h.id = hb.id`;
    expect(await sweepEverywhere()).toMatchObject({ resumed: 1 });
    expect(await sweepEverywhere()).toMatchObject({ resumed: 0 });
    const [incident] = await heartbeatIncidents(["crashed-after-ping"]);
    expect(await timelineKinds(incident!.id)).toEqual(["opened", "resumed"]);
  });

  it("retries on the next sweep a silence the incident core refused", async () => {
    await registerOverdue(["refused-once"]);
    // An organization slug the incident core refuses stands in for a failing core.
    await db`update heartbeats.heartbeats set org_slug = '' where name = 'refused-once'`;
    const refused = await sweepEverywhere();
    expect(refused).toMatchObject({ silent: 1, delivered: 0 });
    // Each of the three sweeps may try it once (a refused delivery is released at once).
    expect(refused.failed).toBeGreaterThanOrEqual(1);
    expect(refused.failed).toBeLessThanOrEqual(3);
    await db`update heartbeats.heartbeats set org_slug = 'acme' where name = 'refused-once'`;
    expect(await sweepEverywhere()).toMatchObject({ silent: 0, delivered: 1, opened: 1, failed: 0 });
    expect(await heartbeatIncidents(["refused-once"])).toHaveLength(1);
  });
});

describe("alert after N consecutive misses, swept by three processes", () => {
  it("declares nothing at the first misses and exactly one silence per heartbeat at the last, whichever process sweeps", async () => {
    const names = Array.from({ length: 12 }, (_, i) => `three-misses-${i}`);
    for (const [i, name] of names.entries()) {
      const res = await apps[i % apps.length]!.call("POST", "/o/acme/heartbeats", {
        token: cast.admin,
        body: { name, expectedIntervalSeconds: 2, graceSeconds: 1, alertAfterMisses: 3 },
      });
      expect(res.status).toBe(201);
    }
    // Each pinged through another process than the one it was registered on; due 3 × 2 + 1 s later.
    let looked = false;
    for (let attempt = 0; attempt < 5 && !looked; attempt++) {
      for (const [i, name] of names.entries()) expect((await ping(apps[(i + 1) % apps.length]!, name, cast.ingestToken)).status).toBe(204);
      // Past the first miss plus grace (3 s after the latest ping), before the deadline (7 s).
      const [{ wait }] = await db<[{ wait: number }]>`
        select greatest(0, extract(epoch from max(last_seen_at) + interval '3.2 seconds' - now()))::float8 as wait
        from heartbeats.heartbeats where name like 'three-misses-%'`;
      await new Promise((resolve) => setTimeout(resolve, wait * 1000));
      const early = await sweepEverywhere();
      const [{ before }] = await db<[{ before: boolean }]>`
        select now() < min(deadline) as before from heartbeats.heartbeats where name like 'three-misses-%'`;
      if (!before) continue;
      looked = true;
      expect(early.silent).toBe(0);
    }
    expect(looked).toBe(true);
    const [{ wait }] = await db<[{ wait: number }]>`
      select greatest(0, extract(epoch from max(deadline) - now()))::float8 + 0.1 as wait from heartbeats.heartbeats where name like 'three-misses-%'`;
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
    let silent = 0;
    let opened = 0;
    for (let round = 0; round < 3; round++) {
      const swept = await sweepEverywhere();
      silent += swept.silent;
      opened += swept.opened;
    }
    expect({ silent, opened }).toEqual({ silent: names.length, opened: names.length });
    const rows = await db<{ name: string; silences: number; after: number }[]>`
      select h.name, count(s.id)::int as silences, extract(epoch from min(s.deadline) - min(s.since))::float8 as after
      from heartbeats.heartbeats h join heartbeats.silences s on s.heartbeat_id = h.id
      where h.name like 'three-misses-%' group by h.name`;
    expect(rows).toHaveLength(names.length);
    for (const row of rows) expect(row, row.name).toMatchObject({ silences: 1, after: 3 * 2 + 1 });
    expect(await heartbeatIncidents(names)).toHaveLength(names.length);
  });
});
