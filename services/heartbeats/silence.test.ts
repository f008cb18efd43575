import postgres from "postgres";
import { afterAll, beforeAll, describe, it } from "vitest";
import { startApp, type TestApp } from "../../test/support/app.js";
import { castOf, eventually, heartbeatsClient, ping, type Cast } from "./testing/kit.js";

// Silence detection by the periodic sweep (every second here), the incident it opens through the
// incident core, the `resumed` entry, and maintenance windows. Over real HTTP, real Postgres.

const SWEEP_SECONDS = 1;
let app: TestApp;
let cast: Cast;
let db: postgres.Sql;

beforeAll(async () => {
  app = await startApp({ env: { HEARTBEAT_SWEEP_SECONDS: String(SWEEP_SECONDS) } });
  cast = await castOf(app);
  db = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await db?.end();
  await app?.stop();
});

interface IncidentSummary {
  id: string;
  title: string;
  severity: string;
  state: string;
  source: string;
  entity: { kind: string; id: string } | null;
  openedAt: string;
}

async function incidentsOf(name: string): Promise<IncidentSummary[]> {
  const res = await app.call("GET", "/o/acme/incidents", { token: cast.member });
  if (res.status !== 200) throw new Error(`listing incidents answered ${res.status}`);
  return (res.body.incidents as IncidentSummary[]).filter((i) => i.entity?.kind === "heartbeat" && i.entity.id === name);
}

async function timelineOf(id: string): Promise<{ kind: string; summary: string | null; eventId: string | null; data?: Record<string, any> }[]> {
  const res = await app.call("GET", `/o/acme/incidents/${id}`, { token: cast.member });
  if (res.status !== 200) throw new Error(`reading incident ${id} answered ${res.status}`);
  return res.body.timeline;
}

async function registerFast(name: string): Promise<{ dueAt: string }> {
  const res = await app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { name, expectedIntervalSeconds: 1, graceSeconds: 1 } });
  if (res.status !== 201) throw new Error(`registering ${name} answered ${res.status}`);
  return res.body;
}

// Concurrent: each test waits on the clock for its own heartbeat.
describe.concurrent("silence", () => {
  it("opens an incident after the deadline, once a sweep sees it, naming the heartbeat and how long it was silent", async ({ expect }) => {
    const registered = await registerFast("never-pinged");
    const [incident] = await eventually("the silence incident", async () => {
      const found = await incidentsOf("never-pinged");
      return found.length > 0 ? found : undefined;
    });
    expect(incident).toMatchObject({ source: "heartbeat", severity: "sev2", state: "open", entity: { kind: "heartbeat", id: "never-pinged" } });
    // The title freezes no duration; the time silent is on the entry.
    expect(incident!.title).toBe("Heartbeat never-pinged went silent");
    // Both times come from the database clock: detected after crossing the deadline, never before
    // it, and opened after it was detected. One sweep interval after the deadline is when it
    // comes on a machine with time to spare; on a busy one the sweep's timer fires late, so the
    // bound below only detects a sweep that stopped (ten sweep intervals).
    const [silence] = await db<{ deadline: Date; detected_at: Date }[]>`
      select s.deadline, s.detected_at from heartbeats.silences s join heartbeats.heartbeats h on h.id = s.heartbeat_id
      where h.name = 'never-pinged'`;
    expect(silence!.deadline.getTime()).toBe(Date.parse(registered.dueAt));
    const detectedAfter = silence!.detected_at.getTime() - silence!.deadline.getTime();
    expect(detectedAfter).toBeGreaterThan(0);
    expect(detectedAfter).toBeLessThanOrEqual(10 * SWEEP_SECONDS * 1000);
    const openedAfter = Date.parse(incident!.openedAt) - Date.parse(registered.dueAt);
    expect(openedAfter).toBeGreaterThanOrEqual(detectedAfter);
    const timeline = await timelineOf(incident!.id);
    expect(timeline[0]).toMatchObject({ kind: "opened" });
    expect(timeline[0]!.summary).toContain("No ping from never-pinged since it was registered");
    expect(timeline[0]!.data).toMatchObject({ heartbeat: "never-pinged", cause: "silence", lastSeenAt: null });
    expect(timeline[0]!.data!.silentSeconds).toBeGreaterThanOrEqual(2);
    const read = await app.call("GET", "/o/acme/heartbeats/never-pinged", { token: cast.member });
    expect(read.body).toMatchObject({ status: "silent", lastSeenAt: null });
  });

  it("counts from the last ping, and opens one incident per silence however many sweeps run", async ({ expect }) => {
    await registerFast("steady");
    expect((await ping(app, "steady", cast.ingestToken)).status).toBe(204);
    const [incident] = await eventually("the silence incident", async () => {
      const found = await incidentsOf("steady");
      return found.length > 0 ? found : undefined;
    });
    expect((await timelineOf(incident!.id))[0]!.summary).toContain("Last ping from steady at");
    // Several timer sweeps and explicit ones later, still one incident and one entry.
    const client = heartbeatsClient(app.process.transport);
    for (let i = 0; i < 5; i++) await client.sweep({});
    await new Promise((resolve) => setTimeout(resolve, 2.5 * SWEEP_SECONDS * 1000));
    const after = await incidentsOf("steady");
    expect(after.map((i) => i.id)).toEqual([incident!.id]);
    expect((await timelineOf(incident!.id)).map((e) => e.kind)).toEqual(["opened"]);
  });

  it("declares no silence while paused; a ping resumes it, as does paused: false, and the expected pings count from then", async ({ expect }) => {
    await registerFast("paused-job");
    const paused = await app.call("PATCH", "/o/acme/heartbeats/paused-job", { token: cast.admin, body: { paused: true } });
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ status: "paused", pausedAt: expect.any(String) });
    expect(paused.body.dueAt ?? null).toBeNull();
    // Well past interval and grace, and several sweeps later: nothing.
    const client = heartbeatsClient(app.process.transport);
    await new Promise((resolve) => setTimeout(resolve, 3 * SWEEP_SECONDS * 1000));
    for (let i = 0; i < 3; i++) await client.sweep({});
    expect(await incidentsOf("paused-job")).toEqual([]);
    expect((await app.call("GET", "/o/acme/heartbeats/paused-job", { token: cast.member })).body.status).toBe("paused");

    // A ping resumes it: from then on a silence is declared as usual.
    expect((await ping(app, "paused-job", cast.ingestToken)).status).toBe(204);
    const resumed = (await app.call("GET", "/o/acme/heartbeats/paused-job", { token: cast.member })).body;
    expect(resumed.status).not.toBe("paused");
    expect(resumed.pausedAt ?? null).toBeNull();
    await eventually("the silence after the resume", async () => {
      const found = await incidentsOf("paused-job");
      return found.length > 0 ? found : undefined;
    });

    // paused: false resumes too, counting from then, and both changes are audited.
    await registerFast("paused-then-resumed");
    await app.call("PATCH", "/o/acme/heartbeats/paused-then-resumed", { token: cast.admin, body: { paused: true } });
    const before = Date.now();
    const back = await app.call("PATCH", "/o/acme/heartbeats/paused-then-resumed", { token: cast.admin, body: { paused: false } });
    expect(back.body.status).toBe("ok");
    expect(Date.parse(back.body.dueAt)).toBeGreaterThanOrEqual(before);
    // The audit log gets them through the outbox, a moment later.
    const updates = await eventually("both changes in the audit log", async () => {
      const audit = await app.call("GET", "/o/acme/audit-events", { token: cast.admin });
      const found = audit.body.events.filter(
        (e: { kind: string; data: { name?: string } }) => e.kind === "heartbeat.updated" && e.data.name === "paused-then-resumed",
      );
      return found.length === 2 ? found : undefined;
    });
    expect(updates.map((e: { data: { paused?: boolean } }) => e.data.paused ?? false).sort()).toEqual([false, true]);
  });

  it("records `resumed` on the open incident after a ping, without resolving it; a new silence attaches to it", async ({ expect }) => {
    await registerFast("flaky");
    const [incident] = await eventually("the silence incident", async () => {
      const found = await incidentsOf("flaky");
      return found.length > 0 ? found : undefined;
    });
    expect((await ping(app, "flaky", cast.ingestToken)).status).toBe(204);
    const timeline = await eventually("the resumed entry", async () => {
      const entries = await timelineOf(incident!.id);
      return entries.some((e) => e.kind === "resumed") ? entries : undefined;
    });
    expect(timeline.map((e) => e.kind)).toEqual(["opened", "resumed"]);
    expect(timeline[1]!.summary).toMatch(/^Ping received from flaky at .* after \d+s of silence\.$/);
    const read = await app.call("GET", `/o/acme/incidents/${incident!.id}`, { token: cast.member });
    expect(read.body.state).toBe("open");
    // Pinging again records nothing more, and the heartbeat is ok until its new deadline (one
    // second and one of grace: a loaded machine may pass it before the read, then it is silent).
    expect((await ping(app, "flaky", cast.ingestToken)).status).toBe(204);
    const heartbeat = (await app.call("GET", "/o/acme/heartbeats/flaky", { token: cast.member })).body;
    if (Date.now() < Date.parse(heartbeat.dueAt)) expect(heartbeat.status).toBe("ok");
    else expect(["ok", "silent"]).toContain(heartbeat.status);
    // Silent again: the incident is still open, so the new silence attaches to it (a repeat).
    const again = await eventually("the second silence", async () => {
      const entries = await timelineOf(incident!.id);
      return entries.some((e) => e.kind === "repeat") ? entries : undefined;
    });
    expect(again.map((e) => e.kind)).toEqual(["opened", "resumed", "repeat"]);
    expect((await incidentsOf("flaky")).map((i) => i.id)).toEqual([incident!.id]);
  });

  it("opens a new incident for a later silence once a person resolved the previous one", async ({ expect }) => {
    await registerFast("resolved-then-silent");
    const [first] = await eventually("the first incident", async () => {
      const found = await incidentsOf("resolved-then-silent");
      return found.length > 0 ? found : undefined;
    });
    expect((await ping(app, "resolved-then-silent", cast.ingestToken)).status).toBe(204);
    await eventually("the resumed entry", async () => ((await timelineOf(first!.id)).some((e) => e.kind === "resumed") ? true : undefined));
    expect((await app.call("POST", `/o/acme/incidents/${first!.id}/resolve`, { token: cast.member })).status).toBe(200);
    const second = await eventually("a second incident", async () => {
      const found = (await incidentsOf("resolved-then-silent")).filter((i) => i.id !== first!.id);
      return found.length > 0 ? found : undefined;
    });
    expect(second).toHaveLength(1);
    expect(second[0]!.state).toBe("open");
  });

  it("carries how the last run ended, what it said, how long it ran, and a start that never finished", async ({ expect }) => {
    await registerFast("last-words");
    const signal = (what: string, body = "", runId = "") =>
      app.call("POST", `/o/acme/heartbeats/last-words/ping${what ? `/${what}` : ""}${runId ? `?run_id=${runId}` : ""}`, {
        token: cast.ingestToken,
        raw: body,
        headers: { "content-type": "text/plain" },
      });
    expect((await signal("start")).status).toBe(204);
    expect((await signal("0", "copied 42 files, 1.2 GB")).status).toBe(204);
    // The next run starts and never finishes: its start replaces the latest ping, not the last run.
    expect((await signal("start")).status).toBe(204);
    const [incident] = await eventually("the silence incident", async () => {
      const found = await incidentsOf("last-words");
      return found.length > 0 ? found : undefined;
    });
    expect(incident!.title).toBe("Heartbeat last-words went silent");
    const [opened] = await timelineOf(incident!.id);
    expect(opened!.summary).toMatch(/Its last run succeeded with exit status 0 at \S+, after running \d+s\./);
    expect(opened!.summary).toMatch(/A run started at \S+ and has not finished\./);
    expect(opened!.summary).toContain("What the last run said:\ncopied 42 files, 1.2 GB");
    expect(opened!.data).toMatchObject({ cause: "silence", lastRun: { kind: "success", exitStatus: 0 } });
    expect(typeof opened!.data!.lastRun.runSeconds).toBe("number");
    expect(Date.parse(opened!.data!.unfinishedStartAt)).toBeGreaterThan(Date.parse(opened!.data!.lastRun.at));
  });

  it("records a silence on the heartbeat's open failure incident: no second incident, not quiet", async ({ expect }) => {
    await registerFast("failed-then-silent");
    const failed = await app.call("POST", "/o/acme/heartbeats/failed-then-silent/ping/3", {
      token: cast.ingestToken,
      raw: "disk full",
      headers: { "content-type": "text/plain" },
    });
    expect(failed.status).toBe(204);
    const [incident] = await eventually("the failure incident", async () => {
      const found = await incidentsOf("failed-then-silent");
      return found.length > 0 ? found : undefined;
    });
    expect(incident!.title).toBe("Heartbeat failed-then-silent failed with exit status 3");
    // No ping after the failure: the heartbeat goes silent too, and the incident says so.
    const timeline = await eventually("the silence on the failure's incident", async () => {
      const entries = await timelineOf(incident!.id);
      return entries.some((e) => e.kind === "repeat") ? entries : undefined;
    });
    expect(timeline.map((e) => e.kind)).toEqual(["opened", "repeat"]);
    expect(timeline[1]!.summary).toContain("It has stopped pinging since it reported the failure.");
    expect(timeline[1]!.summary).toContain("Its last run failed with exit status 3");
    expect(timeline[1]!.summary).toContain("What the last run said:\ndisk full");
    expect(timeline[1]!.data).toMatchObject({ cause: "silence", during: "fail" });
    // More sweeps add nothing, and there is still one incident.
    const client = heartbeatsClient(app.process.transport);
    for (let i = 0; i < 3; i++) await client.sweep({});
    expect((await incidentsOf("failed-then-silent")).map((i) => i.id)).toEqual([incident!.id]);
    expect((await timelineOf(incident!.id)).map((e) => e.kind)).toEqual(["opened", "repeat"]);
    // One success ends both with a single `resumed`.
    expect((await ping(app, "failed-then-silent", cast.ingestToken)).status).toBe(204);
    const ended = await eventually("the resumed entry", async () => {
      const entries = await timelineOf(incident!.id);
      return entries.some((e) => e.kind === "resumed") ? entries : undefined;
    });
    await new Promise((resolve) => setTimeout(resolve, 1.5 * SWEEP_SECONDS * 1000));
    expect((await timelineOf(incident!.id)).filter((e) => e.kind === "resumed")).toHaveLength(1);
    expect(ended.map((e) => e.kind)).toEqual(["opened", "repeat", "resumed"]);
  });

  it("with alertAfterMisses, declares the silence only once that many expected pings in a row are missed", async ({ expect }) => {
    const registered = await app.call("POST", "/o/acme/heartbeats", {
      token: cast.admin,
      body: { name: "flaky-network", expectedIntervalSeconds: 3, graceSeconds: 1, alertAfterMisses: 3 },
    });
    expect(registered.status).toBe(201);
    expect(registered.body.alertAfterMisses).toBe(3);
    // Due after the third expected ping plus grace; the next one is expected after one interval.
    expect(Date.parse(registered.body.dueAt) - Date.parse(registered.body.createdAt)).toBe((3 * 3 + 1) * 1000);
    expect(Date.parse(registered.body.nextExpectedAt) - Date.parse(registered.body.createdAt)).toBe(3 * 1000);
    const client = heartbeatsClient(app.process.transport);
    // Past the first miss (and its grace), a sweep declares nothing while the third is still to come.
    // On a machine too slow to look inside that window, ping and look again.
    let looked = false;
    for (let attempt = 0; attempt < 5 && !looked; attempt++) {
      expect((await ping(app, "flaky-network", cast.ingestToken)).status).toBe(204);
      await eventually("the first miss", async () => {
        const [row] = await db<{ past: boolean }[]>`
          select now() > last_seen_at + interval '4 seconds' as past from heartbeats.heartbeats where name = 'flaky-network'`;
        return row!.past ? true : undefined;
      });
      await client.sweep({});
      const [state] = await db<{ before_deadline: boolean; silences: number }[]>`
        select now() < h.deadline as before_deadline, (select count(*)::int from heartbeats.silences s where s.heartbeat_id = h.id) as silences
        from heartbeats.heartbeats h where h.name = 'flaky-network'`;
      if (!state!.before_deadline) continue;
      looked = true;
      expect(state!.silences).toBe(0);
      const read = await app.call("GET", "/o/acme/heartbeats/flaky-network", { token: cast.member });
      expect(read.body.status).toBe("ok");
      expect(Date.parse(read.body.dueAt) - Date.parse(read.body.lastSeenAt)).toBe((3 * 3 + 1) * 1000);
      expect(Date.parse(read.body.nextExpectedAt) - Date.parse(read.body.lastSeenAt)).toBe(3 * 1000);
      expect(read.body.openIncidentId ?? null).toBe(null);
    }
    expect(looked).toBe(true);
    const [incident] = await eventually("the silence incident", async () => {
      const found = await incidentsOf("flaky-network");
      return found.length > 0 ? found : undefined;
    });
    const [silence] = await db<{ deadline: Date; since: Date; detected_at: Date }[]>`
      select s.deadline, s.since, s.detected_at from heartbeats.silences s join heartbeats.heartbeats h on h.id = s.heartbeat_id
      where h.name = 'flaky-network'`;
    expect(silence!.deadline.getTime() - silence!.since.getTime()).toBe((3 * 3 + 1) * 1000);
    expect(silence!.detected_at.getTime()).toBeGreaterThan(silence!.deadline.getTime());
    const opened = (await timelineOf(incident!.id))[0]!;
    expect(opened.summary).toContain("it expects one every 3s with 1s of grace, alerting after 3 missed in a row.");
    expect(opened.data).toMatchObject({ cause: "silence", alertAfterMisses: 3 });
    // The heartbeat links to its open incident until a ping ends the silence.
    const silent = await app.call("GET", "/o/acme/heartbeats/flaky-network", { token: cast.member });
    expect(silent.body).toMatchObject({ status: "silent", openIncidentId: incident!.id });
    expect((await ping(app, "flaky-network", cast.ingestToken)).status).toBe(204);
    const resumed = await app.call("GET", "/o/acme/heartbeats/flaky-network", { token: cast.member });
    expect(resumed.body.status).toBe("ok");
    expect(resumed.body.openIncidentId ?? null).toBe(null);
  });

  it("is suppressed by an active maintenance window that matches the heartbeat", async ({ expect }) => {
    const now = Date.now();
    const window = await app.call("POST", "/o/acme/maintenance-windows", {
      token: cast.admin,
      body: {
        startsAt: new Date(now - 60_000).toISOString(),
        endsAt: new Date(now + 3_600_000).toISOString(),
        reason: "planned backup migration",
        match: { sources: ["heartbeat"], entities: [{ kind: "heartbeat", id: "in-maintenance" }] },
      },
    });
    expect(window.status).toBe(201);
    await registerFast("in-maintenance");
    // Another heartbeat silent at the same time is not covered by the window.
    await registerFast("outside-maintenance");
    await eventually("the uncovered heartbeat's incident", async () => ((await incidentsOf("outside-maintenance")).length > 0 ? true : undefined));
    const read = await app.call("GET", "/o/acme/heartbeats/in-maintenance", { token: cast.member });
    expect(read.body.status).toBe("silent");
    // Several sweeps later the covered one still has no incident; the suppression is audited.
    await new Promise((resolve) => setTimeout(resolve, 2 * SWEEP_SECONDS * 1000));
    expect(await incidentsOf("in-maintenance")).toEqual([]);
    const audit = await app.call("GET", "/o/acme/audit-events", { token: cast.owner });
    const suppressed = audit.body.events.filter(
      (e: { kind: string; data: { entity?: { id?: string } } }) => e.kind === "trigger.suppressed" && e.data.entity?.id === "in-maintenance",
    );
    expect(suppressed).toHaveLength(1);
  });
});
