import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../test/support/app.js";
import { castOf, eventually, heartbeatsClient, ping, type Cast } from "./testing/kit.js";

// Cron schedules over HTTP: register, read, update and list show the schedule and the next
// expected time; the deadline is the next scheduled time after the last ping plus grace, right
// across DST changes in two zones. A DST day is reached by placing the last ping on it (the
// database row), then asking the API to recompute the deadline (PATCH).

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

const GRACE = 60;

async function register(body: Record<string, unknown>) {
  return app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { graceSeconds: GRACE, ...body } });
}

/** The next expected time after a last ping at `lastPing`, as the API computes it. */
async function nextAfter(name: string, schedule: string, timezone: string, lastPing: string): Promise<string> {
  await db`update heartbeats.heartbeats set last_seen_at = ${lastPing} where name = ${name}`;
  const res = await app.call("PATCH", `/o/acme/heartbeats/${name}`, { token: cast.admin, body: { schedule, timezone } });
  expect(res.status).toBe(200);
  expect(Date.parse(res.body.dueAt) - Date.parse(res.body.nextExpectedAt)).toBe(GRACE * 1000);
  return new Date(res.body.nextExpectedAt).toISOString();
}

describe("register, read, update and list a scheduled heartbeat", () => {
  it("shows the schedule, its time zone and the next expected time; the interval is 0", async () => {
    const res = await register({ name: "nightly-dump", schedule: "30 2 * * *", timezone: "Europe/Berlin" });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      name: "nightly-dump",
      schedule: "30 2 * * *",
      timezone: "Europe/Berlin",
      expectedIntervalSeconds: 0,
      graceSeconds: GRACE,
    });
    const next = new Date(res.body.nextExpectedAt);
    // 02:30 in Berlin is 00:30 or 01:30 UTC, within the next day.
    expect([0, 1]).toContain(next.getUTCHours());
    expect(next.getUTCMinutes()).toBe(30);
    expect(next.getTime() - Date.parse(res.body.createdAt)).toBeLessThanOrEqual(86_400_000 + 3_600_000);
    const read = await app.call("GET", "/o/acme/heartbeats/nightly-dump", { token: cast.member });
    expect(read.body).toMatchObject({ schedule: "30 2 * * *", timezone: "Europe/Berlin", nextExpectedAt: res.body.nextExpectedAt });
    const list = await app.call("GET", "/o/acme/heartbeats", { token: cast.member });
    expect(list.body.heartbeats.find((h: { name: string }) => h.name === "nightly-dump")).toMatchObject({ schedule: "30 2 * * *" });
    // An interval heartbeat shows no schedule.
    const interval = await register({ name: "every-minute", expectedIntervalSeconds: 60 });
    expect(interval.body).toMatchObject({ schedule: null, timezone: null, expectedIntervalSeconds: 60 });
  });

  it("accepts the @hourly-style aliases and UTC by default; switches between interval and schedule", async () => {
    const res = await register({ name: "hourly-alias", schedule: "@hourly" });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ schedule: "@hourly", timezone: "UTC" });
    const next = new Date(res.body.nextExpectedAt);
    expect(next.getUTCMinutes()).toBe(0);
    expect(next.getTime() - Date.parse(res.body.createdAt)).toBeLessThanOrEqual(3_600_000);
    const toInterval = await app.call("PATCH", "/o/acme/heartbeats/hourly-alias", { token: cast.admin, body: { expectedIntervalSeconds: 600 } });
    expect(toInterval.body).toMatchObject({ schedule: null, timezone: null, expectedIntervalSeconds: 600 });
    const back = await app.call("PATCH", "/o/acme/heartbeats/hourly-alias", { token: cast.admin, body: { schedule: "@midnight" } });
    expect(back.body).toMatchObject({ schedule: "@midnight", expectedIntervalSeconds: 0 });
    expect(new Date(back.body.nextExpectedAt).getUTCHours()).toBe(0);
  });

  it.each([
    [{ name: "bad-1", schedule: "* * * *" }, "must have five fields"],
    [{ name: "bad-2", schedule: "0 0 0 * * *" }, "must have five fields"],
    [{ name: "bad-3", schedule: "61 * * * *" }, "is not a valid cron expression"],
    [{ name: "bad-4", schedule: "@reboot" }, "is not a known alias"],
    [{ name: "bad-5", schedule: "0 3 * * *", timezone: "Mars/Olympus" }, "is not an IANA time zone"],
    [{ name: "bad-6", schedule: "0 3 * * *", expectedIntervalSeconds: 60 }, "either expectedIntervalSeconds or schedule"],
    [{ name: "bad-7", schedule: "0 0 29 2 *" }, "less often than once a year"],
    [{ name: "bad-8", expectedIntervalSeconds: 60, timezone: "UTC" }, "timezone goes with a schedule"],
  ])("refuses %j with a clear message", async (body, message) => {
    const res = await register(body);
    expect(res.status).toBe(400);
    expect(res.body.error).toContain(message);
  });
});

describe("DST days", () => {
  beforeAll(async () => {
    expect((await register({ name: "dst", schedule: "@daily" })).status).toBe(201);
  });

  it("Europe/Berlin, spring forward (29 March 2026, 02:00 -> 03:00)", async () => {
    // 02:30 does not exist that night: the run counts as 03:30 CEST, never earlier.
    expect(await nextAfter("dst", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z")).toBe("2026-03-29T01:30:00.000Z");
    expect(await nextAfter("dst", "30 2 * * *", "Europe/Berlin", "2026-03-29T01:31:00Z")).toBe("2026-03-30T00:30:00.000Z");
    // An hourly job: 01:00 CET, then 03:00 CEST an hour of real time later.
    expect(await nextAfter("dst", "0 * * * *", "Europe/Berlin", "2026-03-29T00:30:00Z")).toBe("2026-03-29T01:00:00.000Z");
  });

  it("Europe/Berlin, fall back (25 October 2026, 03:00 -> 02:00)", async () => {
    // A fixed 02:30 runs once, at the first 02:30 (CEST); the next is the next day's.
    expect(await nextAfter("dst", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z")).toBe("2026-10-25T00:30:00.000Z");
    expect(await nextAfter("dst", "30 2 * * *", "Europe/Berlin", "2026-10-25T00:31:00Z")).toBe("2026-10-26T01:30:00.000Z");
    // An hourly job runs in both copies of the repeated hour: 02:00 CEST, 02:00 CET, 03:00 CET.
    expect(await nextAfter("dst", "0 * * * *", "Europe/Berlin", "2026-10-25T00:10:00Z")).toBe("2026-10-25T01:00:00.000Z");
    expect(await nextAfter("dst", "0 * * * *", "Europe/Berlin", "2026-10-25T01:10:00Z")).toBe("2026-10-25T02:00:00.000Z");
  });

  it("America/New_York, spring forward (8 March 2026, 02:00 -> 03:00)", async () => {
    expect(await nextAfter("dst", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z")).toBe("2026-03-08T07:30:00.000Z");
    expect(await nextAfter("dst", "30 2 * * *", "America/New_York", "2026-03-08T07:31:00Z")).toBe("2026-03-09T06:30:00.000Z");
    expect(await nextAfter("dst", "*/30 * * * *", "America/New_York", "2026-03-08T06:40:00Z")).toBe("2026-03-08T07:00:00.000Z");
  });

  it("America/New_York, fall back (1 November 2026, 02:00 -> 01:00)", async () => {
    expect(await nextAfter("dst", "30 1 * * *", "America/New_York", "2026-11-01T00:00:00Z")).toBe("2026-11-01T05:30:00.000Z");
    expect(await nextAfter("dst", "30 1 * * *", "America/New_York", "2026-11-01T05:31:00Z")).toBe("2026-11-02T06:30:00.000Z");
    // Every half hour, through both 01:xx hours: 01:30 EDT, 01:00 EST, 01:30 EST.
    expect(await nextAfter("dst", "*/30 * * * *", "America/New_York", "2026-11-01T05:10:00Z")).toBe("2026-11-01T05:30:00.000Z");
    expect(await nextAfter("dst", "*/30 * * * *", "America/New_York", "2026-11-01T05:40:00Z")).toBe("2026-11-01T06:00:00.000Z");
    expect(await nextAfter("dst", "*/30 * * * *", "America/New_York", "2026-11-01T06:10:00Z")).toBe("2026-11-01T06:30:00.000Z");
  });
});

describe("pings and the sweep on a schedule", () => {
  it("a ping moves the deadline to the next scheduled time plus grace", async () => {
    expect((await register({ name: "scheduled-ping", schedule: "*/5 * * * *" })).status).toBe(201);
    expect((await ping(app, "scheduled-ping", cast.ingestToken)).status).toBe(204);
    const read = await eventually("the exact deadline", async () => {
      const res = await app.call("GET", "/o/acme/heartbeats/scheduled-ping", { token: cast.member });
      const next = new Date(res.body.nextExpectedAt);
      return next.getUTCMinutes() % 5 === 0 && next.getUTCSeconds() === 0 ? res.body : undefined;
    });
    const next = Date.parse(read.nextExpectedAt);
    const seen = Date.parse(read.lastSeenAt);
    expect(next).toBeGreaterThan(seen);
    expect(next - seen).toBeLessThanOrEqual(5 * 60_000);
  });

  it("with alertAfterMisses, a ping moves the deadline to the last scheduled time that may be missed, plus grace", async () => {
    expect((await register({ name: "scheduled-misses", schedule: "*/5 * * * *", alertAfterMisses: 3 })).status).toBe(201);
    expect((await ping(app, "scheduled-misses", cast.ingestToken)).status).toBe(204);
    // The ping writes a safe deadline (three whole gaps away), then the exact one.
    const read = await eventually("the exact deadline", async () => {
      const res = await app.call("GET", "/o/acme/heartbeats/scheduled-misses", { token: cast.member });
      const due = new Date(Date.parse(res.body.dueAt) - GRACE * 1000);
      return due.getUTCMinutes() % 5 === 0 && due.getUTCSeconds() === 0 && due.getUTCMilliseconds() === 0 ? res.body : undefined;
    });
    const next = Date.parse(read.nextExpectedAt);
    const seen = Date.parse(read.lastSeenAt);
    expect(next).toBeGreaterThan(seen);
    expect(next - seen).toBeLessThanOrEqual(5 * 60_000);
    // The third scheduled time after the ping: two more five-minute steps after the next one.
    expect(Date.parse(read.dueAt) - GRACE * 1000 - next).toBe(2 * 5 * 60_000);
  });

  it("a scheduled heartbeat whose time passed without a ping opens an incident", async () => {
    expect((await register({ name: "missed-cron", schedule: "* * * * *", graceSeconds: 1 })).status).toBe(201);
    // Its registration was over a minute ago.
    await db`update heartbeats.heartbeats set created_at = now() - interval '3 minutes', deadline = now() - interval '1 minute' where name = 'missed-cron'`;
    expect((await heartbeatsClient(app.process.transport).sweep({})).opened).toBeGreaterThanOrEqual(1);
    const incidents = await app.call("GET", "/o/acme/incidents", { token: cast.member });
    const incident = incidents.body.incidents.find((i: { entity: { id: string } | null }) => i.entity?.id === "missed-cron");
    expect(incident.title).toBe("Heartbeat missed-cron went silent");
    const timeline = (await app.call("GET", `/o/acme/incidents/${incident.id}`, { token: cast.member })).body.timeline;
    expect(timeline[0].summary).toContain('on the schedule "* * * * *" (UTC)');
  });
});
