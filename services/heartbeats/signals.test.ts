import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../test/support/app.js";
import { castOf, eventually, heartbeatsClient, type Cast } from "./testing/kit.js";

// Signals on the ping route (start, fail, exit status, run_id), run times, "ran too long", what
// the job said, and the ping history. Over real HTTP, real Postgres; the periodic sweep is an
// hour away, so a failure that opens an incident does so without any sweep.

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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const sweep = () => heartbeatsClient(app.process.transport).sweep({});

async function register(name: string, extra: Record<string, unknown> = {}): Promise<void> {
  const res = await app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { name, expectedIntervalSeconds: 3600, graceSeconds: 60, ...extra } });
  expect(res.status).toBe(201);
}

async function signal(name: string, what: string, options: { runId?: string; body?: string | Buffer; token?: string } = {}) {
  const query = options.runId ? `?run_id=${options.runId}` : "";
  const path = what ? `/o/acme/heartbeats/${name}/ping/${what}${query}` : `/o/acme/heartbeats/${name}/ping${query}`;
  return app.call("POST", path, { token: options.token ?? cast.ingestToken, raw: options.body ?? "", headers: { "content-type": "text/plain" } });
}

async function read(name: string) {
  const res = await app.call("GET", `/o/acme/heartbeats/${name}`, { token: cast.member });
  expect(res.status).toBe(200);
  return res.body;
}

async function incidentsOf(name: string): Promise<{ id: string; title: string; state: string }[]> {
  const res = await app.call("GET", "/o/acme/incidents?limit=1000", { token: cast.member });
  return res.body.incidents.filter((i: { entity: { kind: string; id: string } | null }) => i.entity?.kind === "heartbeat" && i.entity.id === name);
}

async function timelineOf(id: string): Promise<{ kind: string; summary: string | null }[]> {
  return (await app.call("GET", `/o/acme/incidents/${id}`, { token: cast.member })).body.timeline;
}

async function firstIncident(name: string) {
  const [incident] = await eventually(`the incident of ${name}`, async () => {
    const found = await incidentsOf(name);
    return found.length > 0 ? found : undefined;
  });
  return incident!;
}

/** How far a stored run time may exceed the test's own measurement: its rounding, not a budget. */
const RUN_SECONDS_SLACK = 0.05;

describe("signals", () => {
  it("keeps the run time from start to success, and shows the last ping", async () => {
    await register("timed-job");
    const sent = Date.now();
    expect((await signal("timed-job", "start")).status).toBe(204);
    expect((await read("timed-job")).runningSince).not.toBeNull();
    await sleep(600);
    expect((await signal("timed-job", "0", { body: "backup done: 12 files" })).status).toBe(204);
    const window = (Date.now() - sent) / 1000;
    const hb = await read("timed-job");
    expect(hb.runningSince).toBeNull();
    expect(hb.lastPing).toMatchObject({ kind: "success", exitStatus: 0, body: "backup done: 12 files", bodyCut: false, bodyBytes: 21 });
    // At least the 600 ms the job slept, and at most the time from sending its start to the
    // answer to its end, however slow the machine (RUN_SECONDS_SLACK for the stored rounding).
    expect(hb.lastPing.runSeconds).toBeGreaterThanOrEqual(0.5);
    expect(hb.lastPing.runSeconds).toBeLessThanOrEqual(window + RUN_SECONDS_SLACK);
    expect(hb.lastSeenAt).not.toBeNull();
    expect(hb.status).toBe("ok");
  });

  it("a fail opens an incident at once with what the job said; a success then records resumed", async () => {
    await register("failing-backup");
    const stderr = "pg_dump: error: connection to server failed: FATAL: password authentication failed";
    expect((await signal("failing-backup", "fail", { body: stderr })).status).toBe(204);
    const incident = await firstIncident("failing-backup");
    expect(incident.title).toBe("Heartbeat failing-backup failed");
    const opened = await timelineOf(incident.id);
    expect(opened[0]!.summary).toContain(stderr);
    // A second failure records on the open incident.
    expect((await signal("failing-backup", "2", { body: "again" })).status).toBe(204);
    await eventually("the repeat", async () => ((await timelineOf(incident.id)).some((e) => e.kind === "repeat") ? true : undefined));
    expect((await signal("failing-backup", "0", { body: "ok now" })).status).toBe(204);
    const timeline = await eventually("the resumed entry", async () => {
      const entries = await timelineOf(incident.id);
      return entries.some((e) => e.kind === "resumed") ? entries : undefined;
    });
    expect(timeline.map((e) => e.kind)).toEqual(["opened", "repeat", "resumed"]);
    expect(timeline[1]!.summary).toContain("exit status 2");
    expect(timeline[2]!.summary).toContain("ok now");
    expect(await incidentsOf("failing-backup")).toHaveLength(1);
  });

  it("a non-zero exit status opens an incident naming it", async () => {
    await register("exit-status");
    expect((await signal("exit-status", "3")).status).toBe(204);
    const incident = await firstIncident("exit-status");
    expect(incident.title).toBe("Heartbeat exit-status failed with exit status 3");
    expect((await read("exit-status")).lastPing).toMatchObject({ kind: "fail", exitStatus: 3 });
  });

  it("pairs the starts and ends of overlapping runs by run_id", async () => {
    await register("overlapping");
    const a = randomUUID();
    const b = randomUUID();
    expect((await signal("overlapping", "start", { runId: a })).status).toBe(204);
    await sleep(1_000);
    const bSent = Date.now();
    expect((await signal("overlapping", "start", { runId: b })).status).toBe(204);
    await sleep(300);
    // A ends 1.3 s after it started; B, which started later, ends 0.3 s after its start.
    expect((await signal("overlapping", "0", { runId: a })).status).toBe(204);
    expect((await read("overlapping")).runningSince).not.toBeNull();
    expect((await signal("overlapping", "0", { runId: b })).status).toBe(204);
    const bWindow = (Date.now() - bSent) / 1000;
    const history = (await app.call("GET", "/o/acme/heartbeats/overlapping/pings", { token: cast.member })).body.pings as {
      kind: string;
      runId: string | null;
      runSeconds: number | null;
    }[];
    const endA = history.find((p) => p.kind === "success" && p.runId === a)!;
    const endB = history.find((p) => p.kind === "success" && p.runId === b)!;
    expect(endA.runSeconds).toBeGreaterThanOrEqual(1.2);
    // B's run lies inside the window from sending its start to the answer to its end: paired with
    // A's start it would be a second longer than that window (while an answer takes under a
    // second), and no clock budget decides it.
    expect(endB.runSeconds).toBeLessThanOrEqual(bWindow + RUN_SECONDS_SLACK);
    expect(endB.runSeconds).toBeGreaterThanOrEqual(0.25);
    expect((await read("overlapping")).runningSince).toBeNull();
  });

  it("opens a 'ran too long' incident for a start with no end within maxRunSeconds, and resumed on the end", async () => {
    await register("long-runner", { maxRunSeconds: 1 });
    expect((await read("long-runner")).maxRunSeconds).toBe(1);
    expect((await signal("long-runner", "start")).status).toBe(204);
    await sleep(1_300);
    expect((await sweep()).silent).toBe(1);
    const incident = await firstIncident("long-runner");
    expect(incident.title).toBe("Heartbeat long-runner ran too long");
    expect((await sweep()).silent).toBe(0);
    expect((await signal("long-runner", "0")).status).toBe(204);
    const timeline = await eventually("the resumed entry", async () => {
      const entries = await timelineOf(incident.id);
      return entries.some((e) => e.kind === "resumed") ? entries : undefined;
    });
    expect(timeline.map((e) => e.kind)).toEqual(["opened", "resumed"]);
    expect(timeline[1]!.summary).toMatch(/The run took \d+s\./);
  });

  it("keeps the first 10 KiB of the body as text, with the cut marked", async () => {
    await register("chatty");
    const body = "x".repeat(12 * 1024);
    expect((await signal("chatty", "fail", { body })).status).toBe(204);
    const hb = await read("chatty");
    expect(hb.lastPing).toMatchObject({ kind: "fail", bodyCut: true, bodyBytes: 12 * 1024 });
    expect(hb.lastPing.body).toBe("x".repeat(10 * 1024));
    const incident = await firstIncident("chatty");
    const [opened] = await timelineOf(incident.id);
    expect(opened!.summary).toContain(`${"x".repeat(10 * 1024)}\n[… cut: the first 10240 of 12288 bytes are shown]`);
    // A multi-byte character across the cut is not split; binary is not kept.
    const accents = "é".repeat(6000);
    expect((await signal("chatty", "", { body: accents })).status).toBe(204);
    const cut = (await read("chatty")).lastPing;
    expect(cut.body).toBe("é".repeat(5120));
    expect(cut.bodyCut).toBe(true);
    expect((await signal("chatty", "", { body: Buffer.from([0xff, 0x00, 0x81, 0x02]) })).status).toBe(204);
    expect((await read("chatty")).lastPing).toMatchObject({ body: "", bodyBytes: 4, bodyCut: false });
  });

  it("refuses with the one identical answer: wrong token, other organization, unknown name, unknown signal", async () => {
    await register("guarded");
    const refusals = [
      await signal("guarded", "start", { token: "0".repeat(64) }),
      await signal("guarded", "fail", { token: cast.otherIngestToken }),
      await signal("no-such-heartbeat", "0"),
      await signal("guarded", "256"),
      await signal("guarded", "finish"),
    ];
    for (const res of refusals) expect({ status: res.status, body: res.body }).toEqual({ status: 404, body: { error: "not found" } });
    expect((await read("guarded")).lastPing).toBeNull();
    const badRun = await signal("guarded", "start", { runId: "not-a-uuid" });
    expect(badRun.status).toBe(400);
    expect(badRun.body.error).toBe("run_id must be a UUID");
  });
});

describe("a run that finished too quickly (minRunSeconds)", () => {
  it("opens its own incident for a success sooner than the shortest run, and resumed on a run long enough", async () => {
    const res = await app.call("POST", "/o/acme/heartbeats", {
      token: cast.admin,
      body: { name: "too-quick", expectedIntervalSeconds: 3600, graceSeconds: 60, minRunSeconds: 2 },
    });
    expect(res.status).toBe(201);
    expect(res.body.minRunSeconds).toBe(2);
    // A success without a start has no run time to judge: it is an ordinary success.
    expect((await signal("too-quick", "")).status).toBe(204);
    expect(await incidentsOf("too-quick")).toEqual([]);
    // A backup that did nothing: started and "succeeded" at once.
    expect((await signal("too-quick", "start")).status).toBe(204);
    expect((await signal("too-quick", "0", { body: "0 files copied" })).status).toBe(204);
    const incident = await firstIncident("too-quick");
    expect(incident.title).toBe("Heartbeat too-quick finished too quickly");
    const [opened] = await timelineOf(incident.id);
    expect(opened!.summary).toMatch(/^A run of too-quick reported success at \S+ after running 0s; runs take at least 2s\.\n\n0 files copied$/);
    expect((await read("too-quick")).lastPing).toMatchObject({ kind: "success", body: "0 files copied" });
    // A run long enough ends it: one resumed, no second incident.
    expect((await signal("too-quick", "start")).status).toBe(204);
    await sleep(2100);
    expect((await signal("too-quick", "0", { body: "42 files copied" })).status).toBe(204);
    const timeline = await eventually("the resumed entry", async () => {
      const entries = await timelineOf(incident.id);
      return entries.some((e) => e.kind === "resumed") ? entries : undefined;
    });
    expect(timeline.map((e) => e.kind)).toEqual(["opened", "resumed"]);
    expect(timeline[1]!.summary).toContain("after it finished a run too quickly");
    expect((await incidentsOf("too-quick")).map((i) => i.id)).toEqual([incident.id]);
  });

  it("is checked against the run limit and can be removed", async () => {
    const bad = await app.call("POST", "/o/acme/heartbeats", {
      token: cast.admin,
      body: { name: "quick-bad", expectedIntervalSeconds: 3600, graceSeconds: 60, minRunSeconds: 600, maxRunSeconds: 600 },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe("minRunSeconds (600) must be less than maxRunSeconds (600)");
    for (const minRunSeconds of [-1, 1.5, 7 * 86_400 + 1]) {
      const res = await app.call("POST", "/o/acme/heartbeats", {
        token: cast.admin,
        body: { name: "quick-bad", expectedIntervalSeconds: 3600, graceSeconds: 60, minRunSeconds },
      });
      expect(res.status, String(minRunSeconds)).toBe(400);
    }
    await register("quick-edit", { maxRunSeconds: 600 });
    expect((await app.call("PATCH", "/o/acme/heartbeats/quick-edit", { token: cast.admin, body: { minRunSeconds: 900 } })).status).toBe(400);
    const set = await app.call("PATCH", "/o/acme/heartbeats/quick-edit", { token: cast.admin, body: { minRunSeconds: 30 } });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ minRunSeconds: 30, maxRunSeconds: 600 });
    const removed = await app.call("PATCH", "/o/acme/heartbeats/quick-edit", { token: cast.admin, body: { minRunSeconds: 0 } });
    expect(removed.body.minRunSeconds).toBeNull();
  });
});

describe("history", () => {
  it("lists the last 100 pings, newest first, with kind, run time, exit status, client address and body size", async () => {
    await register("busy");
    expect((await signal("busy", "start")).status).toBe(204);
    expect((await signal("busy", "0", { body: "hello" })).status).toBe(204);
    expect((await signal("busy", "7")).status).toBe(204);
    let res = await app.call("GET", "/o/acme/heartbeats/busy/pings", { token: cast.member });
    expect(res.status).toBe(200);
    expect(res.body.pings.map((p: { kind: string }) => p.kind)).toEqual(["fail", "success", "start"]);
    expect(res.body.pings[0]).toMatchObject({ kind: "fail", exitStatus: 7, bodyBytes: 0, runSeconds: null });
    expect(res.body.pings[1]).toMatchObject({ kind: "success", exitStatus: 0, bodyBytes: 5, clientAddress: expect.stringMatching(/127\.0\.0\.1/) });
    expect(res.body.pings[1].runSeconds).toBeGreaterThanOrEqual(0);
    for (let i = 0; i < 105; i++) expect((await signal("busy", "")).status).toBe(204);
    res = await app.call("GET", "/o/acme/heartbeats/busy/pings", { token: cast.member });
    expect(res.body.pings).toHaveLength(100);
    const times = res.body.pings.map((p: { at: string }) => Date.parse(p.at));
    expect(times).toEqual([...times].sort((x, y) => y - x));
    const [count] = await db<
      { n: number }[]
    >`select count(*)::int as n from heartbeats.pings p join heartbeats.heartbeats h on h.id = p.heartbeat_id where h.name = 'busy'`;
    expect(count!.n).toBe(100);
    expect((await app.call("GET", "/o/acme/heartbeats/nope/pings", { token: cast.member })).status).toBe(404);
    expect((await app.call("GET", "/o/acme/heartbeats/busy/pings", { token: cast.otherAdmin })).status).toBe(403);
  });
});
