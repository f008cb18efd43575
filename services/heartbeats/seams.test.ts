import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../test/support/app.js";
import { castOf, eventually, heartbeatsClient, ping, type Cast } from "./testing/kit.js";

// Where a heartbeat's alert used to be lost: a silence that began inside a maintenance window,
// and a `resumed` still pending when the next silence began. Every sweep here is one the test
// asks for (the periodic one is an hour away). Over real HTTP, real Postgres.

let app: TestApp;
let cast: Cast;
let db: postgres.Sql;

beforeAll(async () => {
  app = await startApp({ env: { HEARTBEAT_SWEEP_SECONDS: "3600" } });
  cast = await castOf(app);
  db = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await db?.end();
  await app?.stop();
});

const sweep = () => heartbeatsClient(app.process.transport).sweep({});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function register(name: string): Promise<void> {
  const res = await app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { name, expectedIntervalSeconds: 1, graceSeconds: 1 } });
  expect(res.status).toBe(201);
}

async function incidentsOf(name: string): Promise<{ id: string; state: string }[]> {
  const res = await app.call("GET", "/o/acme/incidents?limit=1000", { token: cast.member });
  return res.body.incidents.filter((i: { entity: { kind: string; id: string } | null }) => i.entity?.kind === "heartbeat" && i.entity.id === name);
}

async function timelineOf(id: string): Promise<{ kind: string; summary: string | null; eventId: string | null }[]> {
  return (await app.call("GET", `/o/acme/incidents/${id}`, { token: cast.member })).body.timeline;
}

async function suppressedAudits(name: string): Promise<unknown[]> {
  const audit = await app.call("GET", "/o/acme/audit-events", { token: cast.owner });
  return audit.body.events.filter((e: { kind: string; data: { entity?: { id?: string } } }) => e.kind === "trigger.suppressed" && e.data.entity?.id === name);
}

async function windowFor(name: string, endsInMs: number): Promise<string> {
  const now = Date.now();
  const res = await app.call("POST", "/o/acme/maintenance-windows", {
    token: cast.admin,
    body: {
      startsAt: new Date(now - 60_000).toISOString(),
      endsAt: new Date(now + endsInMs).toISOString(),
      reason: "deploy",
      match: { sources: ["heartbeat"], entities: [{ kind: "heartbeat", id: name }] },
    },
  });
  expect(res.status).toBe(201);
  return res.body.id;
}

describe("a heartbeat that goes silent during a maintenance window", () => {
  it("alerts once the window ends if it is still silent, with one suppression audited", async () => {
    const name = "silent-through-deploy";
    await windowFor(name, 6_000);
    await register(name);
    await sleep(2_200);
    expect(await sweep()).toMatchObject({ silent: 1, suppressed: 1, opened: 0 });
    // Sweeps during the window open nothing and audit nothing more.
    for (let i = 0; i < 3; i++) expect((await sweep()).opened).toBe(0);
    expect(await incidentsOf(name)).toEqual([]);
    await eventually("the suppression audit", async () => ((await suppressedAudits(name)).length > 0 ? true : undefined));
    // The window ends; the heartbeat is still silent: the next sweep opens the incident.
    await eventually("the incident after the window", async () => {
      await sweep();
      const found = await incidentsOf(name);
      return found.length > 0 ? found : undefined;
    });
    const [incident] = await incidentsOf(name);
    const timeline = await timelineOf(incident!.id);
    expect(timeline.map((e) => e.kind)).toEqual(["opened"]);
    expect(timeline[0]!.summary).toContain("maintenance window");
    expect(timeline[0]!.summary).toContain("held until the window ended");
    // More sweeps: still one incident, and the window was audited once.
    await sweep();
    expect(await incidentsOf(name)).toHaveLength(1);
    expect(await suppressedAudits(name)).toHaveLength(1);
  });

  it("opens nothing when a ping ends the silence before the window ends", async () => {
    const name = "recovered-in-deploy";
    await windowFor(name, 4_000);
    await register(name);
    await sleep(2_200);
    expect((await sweep()).suppressed).toBe(1);
    expect((await ping(app, name, cast.ingestToken)).status).toBe(204);
    await db`update heartbeats.heartbeats set expected_interval_seconds = 3600, deadline = now() + interval '1 hour' where name = ${name}`;
    await sleep(4_500);
    await sweep();
    await sweep();
    expect(await incidentsOf(name)).toEqual([]);
  });

  it("is offered again when the window is deleted early", async () => {
    const name = "window-deleted";
    const id = await windowFor(name, 3_600_000);
    await register(name);
    await sleep(2_200);
    expect((await sweep()).suppressed).toBe(1);
    expect((await app.call("DELETE", `/o/acme/maintenance-windows/${id}`, { token: cast.admin })).status).toBe(204);
    // The recheck comes at most SUPPRESSED_RECHECK_SECONDS later; bring it forward here.
    await db`update heartbeats.silences s set suppressed_until = now() from heartbeats.heartbeats h where h.id = s.heartbeat_id and h.name = ${name}`;
    expect((await sweep()).opened).toBe(1);
    expect(await incidentsOf(name)).toHaveLength(1);
  });
});

describe("a ping never erases a pending `resumed`", () => {
  it("records the resumed of both silences when the incident core was down through them", async () => {
    const name = "two-silences";
    await register(name);
    await sleep(2_200);
    expect((await sweep()).opened).toBe(1);
    const [incident] = await incidentsOf(name);
    // The incident core refuses everything for this heartbeat from now on (an organization slug
    // it does not accept stands in for a core that is down).
    await db`update heartbeats.heartbeats set org_slug = '' where name = ${name}`;
    expect((await ping(app, name, cast.ingestToken)).status).toBe(204);
    // Silence 2 begins and is detected before silence 1's resumed could be written.
    await sleep(2_200);
    expect(await sweep()).toMatchObject({ silent: 1, delivered: 0 });
    // The ping that ends silence 2.
    expect((await ping(app, name, cast.ingestToken)).status).toBe(204);
    await db`update heartbeats.heartbeats set org_slug = 'acme', expected_interval_seconds = 3600, deadline = now() + interval '1 hour' where name = ${name}`;
    await eventually("both resumed entries", async () => {
      await sweep();
      const entries = await timelineOf(incident!.id);
      return entries.filter((e) => e.kind === "resumed").length >= 2 ? entries : undefined;
    });
    const entries = await timelineOf(incident!.id);
    expect(entries.map((e) => e.kind).sort()).toEqual(["opened", "repeat", "resumed", "resumed"]);
    expect(new Set(entries.filter((e) => e.kind === "resumed").map((e) => e.eventId)).size).toBe(2);
  });
});
