import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshDatabase, startApp, type TestApp } from "../../test/support/app.js";
import { auditEvents } from "../../test/e2e/triggers-kit.js";
import { startPgWireTap } from "../../test/support/pg-wire-tap.js";
import { castOf, ping, type Cast } from "./testing/kit.js";
import { HEARTBEATS_PER_ORG } from "./registry.js";

// Management routes, roles and the ping, over real HTTP against a real Postgres.

let app: TestApp;
let cast: Cast;
let db: postgres.Sql;

beforeAll(async () => {
  app = await startApp();
  cast = await castOf(app);
  db = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await db?.end();
  await app?.stop();
});

const register = (token: string | undefined, body: unknown, org = "acme") => app.call("POST", `/o/${org}/heartbeats`, { token, body });

describe("register", () => {
  it("answers 201 with the heartbeat, lastSeenAt null before the first ping", async () => {
    const res = await register(cast.admin, { name: "nightly-backup", expectedIntervalSeconds: 86400, graceSeconds: 600 });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ name: "nightly-backup", expectedIntervalSeconds: 86400, graceSeconds: 600, lastSeenAt: null, status: "ok" });
    // Due at registration + interval + grace: a heartbeat never pinged counts from its registration.
    const due = Date.parse(res.body.dueAt) - Date.parse(res.body.createdAt);
    expect(due).toBe((86400 + 600) * 1000);
  });

  it("lets an owner register too (roles nest)", async () => {
    const res = await register(cast.owner, { name: "owner-made", expectedIntervalSeconds: 60, graceSeconds: 30 });
    expect(res.status).toBe(201);
  });

  it("refuses a member (403), another organization's admin (403) and no credential (401)", async () => {
    const body = { name: "not-allowed", expectedIntervalSeconds: 60, graceSeconds: 30 };
    expect((await register(cast.member, body)).status).toBe(403);
    expect((await register(cast.otherAdmin, body)).status).toBe(403);
    expect((await register(undefined, body)).status).toBe(401);
    expect((await app.call("GET", "/o/acme/heartbeats/not-allowed", { token: cast.owner })).status).toBe(404);
  });

  it("answers 409 for a name already registered in the organization, and allows it in another", async () => {
    const body = { name: "dup", expectedIntervalSeconds: 60, graceSeconds: 30 };
    expect((await register(cast.admin, body)).status).toBe(201);
    const again = await register(cast.admin, { ...body, expectedIntervalSeconds: 120 });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: 'a heartbeat named "dup" already exists' });
    expect((await register(cast.otherAdmin, body, "globex")).status).toBe(201);
  });

  it.each([
    [{ expectedIntervalSeconds: 60, graceSeconds: 30 }, "name is required"],
    [{ name: "Nightly", expectedIntervalSeconds: 60, graceSeconds: 30 }, "name must be 1-63 characters"],
    [{ name: "-leading-dash", expectedIntervalSeconds: 60, graceSeconds: 30 }, "name must be 1-63 characters"],
    [{ name: "a/b", expectedIntervalSeconds: 60, graceSeconds: 30 }, "name must be 1-63 characters"],
    [{ name: "with space", expectedIntervalSeconds: 60, graceSeconds: 30 }, "name must be 1-63 characters"],
    [{ name: "x".repeat(64), expectedIntervalSeconds: 60, graceSeconds: 30 }, "name must be 1-63 characters"],
    [{ name: "ok-name" }, "expectedIntervalSeconds is required"],
    [{ name: "ok-name", expectedIntervalSeconds: 0, graceSeconds: 30 }, "expectedIntervalSeconds is required"],
    [{ name: "ok-name", expectedIntervalSeconds: -5, graceSeconds: 30 }, "expectedIntervalSeconds must be a whole number of seconds from 1 to 2678400"],
    [
      { name: "ok-name", expectedIntervalSeconds: 31 * 86400 + 1, graceSeconds: 30 },
      "expectedIntervalSeconds must be a whole number of seconds from 1 to 2678400",
    ],
    [{ name: "ok-name", expectedIntervalSeconds: 1.5, graceSeconds: 30 }, "invalid value for expectedIntervalSeconds"],
    [{ name: "ok-name", expectedIntervalSeconds: "often", graceSeconds: 30 }, "invalid value for expectedIntervalSeconds"],
    [{ name: "ok-name", expectedIntervalSeconds: 60 }, "graceSeconds is required"],
    [{ name: "ok-name", expectedIntervalSeconds: 60, graceSeconds: 7 * 86400 + 1 }, "graceSeconds must be a whole number of seconds from 1 to 604800"],
  ])("answers 400 with a clear message for %j", async (body, message) => {
    const res = await register(cast.admin, body);
    expect(res.status).toBe(400);
    expect(res.body.error).toContain(message);
  });

  it("accepts the bounds themselves and a 63-character name", async () => {
    const res = await register(cast.admin, { name: `a${"b.c_d-9".repeat(8)}xxxxxx`, expectedIntervalSeconds: 31 * 86400, graceSeconds: 7 * 86400 });
    expect(res.status).toBe(201);
    expect(res.body.name).toHaveLength(63);
  });
});

describe("list and read", () => {
  beforeAll(async () => {
    await register(cast.admin, { name: "list-a", expectedIntervalSeconds: 300, graceSeconds: 60 });
    await register(cast.admin, { name: "list-b", expectedIntervalSeconds: 600, graceSeconds: 120 });
  });

  it("lists the organization's heartbeats for any member, by name, with lastSeenAt", async () => {
    const res = await app.call("GET", "/o/acme/heartbeats", { token: cast.member });
    expect(res.status).toBe(200);
    const names = res.body.heartbeats.map((h: { name: string }) => h.name);
    expect(names).toContain("list-a");
    expect(names).toEqual([...names].sort());
    // Only acme's: globex's "dup" is not counted twice.
    expect(names.filter((n: string) => n === "dup")).toHaveLength(1);
    const a = res.body.heartbeats.find((h: { name: string }) => h.name === "list-a");
    expect(Object.keys(a)).toEqual(expect.arrayContaining(["name", "expectedIntervalSeconds", "graceSeconds", "lastSeenAt"]));
    expect(a.lastSeenAt).toBeNull();
  });

  it("reads one heartbeat for any member; 404 for an unknown name", async () => {
    const res = await app.call("GET", "/o/acme/heartbeats/list-b", { token: cast.member });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: "list-b", expectedIntervalSeconds: 600, graceSeconds: 120, lastSeenAt: null });
    const missing = await app.call("GET", "/o/acme/heartbeats/nope", { token: cast.member });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ error: 'no heartbeat named "nope"' });
  });

  it("refuses another organization's admin (403) and no credential (401)", async () => {
    expect((await app.call("GET", "/o/acme/heartbeats", { token: cast.otherAdmin })).status).toBe(403);
    expect((await app.call("GET", "/o/acme/heartbeats")).status).toBe(401);
    expect((await app.call("GET", "/o/acme/heartbeats/list-a", { token: cast.otherAdmin })).status).toBe(403);
    expect((await app.call("GET", "/o/acme/heartbeats/list-a")).status).toBe(401);
  });
});

describe("update", () => {
  beforeAll(async () => {
    await register(cast.admin, { name: "upd", expectedIntervalSeconds: 300, graceSeconds: 60 });
  });

  it("changes interval and grace for an admin, and moves the deadline", async () => {
    const res = await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.admin, body: { expectedIntervalSeconds: 900 } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: "upd", expectedIntervalSeconds: 900, graceSeconds: 60 });
    expect(Date.parse(res.body.dueAt) - Date.parse(res.body.createdAt)).toBe((900 + 60) * 1000);
    const grace = await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.owner, body: { graceSeconds: 30, name: "upd" } });
    expect(grace.status).toBe(200);
    expect(grace.body).toMatchObject({ expectedIntervalSeconds: 900, graceSeconds: 30 });
    const read = await app.call("GET", "/o/acme/heartbeats/upd", { token: cast.member });
    expect(read.body).toMatchObject({ expectedIntervalSeconds: 900, graceSeconds: 30 });
  });

  it("refuses a rename with a message that says renaming is delete and re-register", async () => {
    const res = await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.admin, body: { name: "renamed", graceSeconds: 10 } });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe(
      'a heartbeat cannot be renamed (its name is fixed once registered): to use the name "renamed", delete "upd" and register "renamed"',
    );
    expect((await app.call("GET", "/o/acme/heartbeats/renamed", { token: cast.admin })).status).toBe(404);
    expect((await app.call("GET", "/o/acme/heartbeats/upd", { token: cast.admin })).body.graceSeconds).toBe(30);
  });

  it("answers 400 for bad values or nothing to update, 404 for an unknown name", async () => {
    const bad = await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.admin, body: { expectedIntervalSeconds: 0 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toContain("expectedIntervalSeconds");
    const tooMuchGrace = await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.admin, body: { graceSeconds: 999999999 } });
    expect(tooMuchGrace.status).toBe(400);
    const empty = await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.admin, body: {} });
    expect(empty.status).toBe(400);
    expect(empty.body.error).toBe(
      "nothing to update: send one or more of expectedIntervalSeconds, schedule, timezone, graceSeconds, maxRunSeconds, minRunSeconds, alertAfterMisses, paused",
    );
    const missing = await app.call("PATCH", "/o/acme/heartbeats/nope", { token: cast.admin, body: { graceSeconds: 5 } });
    expect(missing.status).toBe(404);
  });

  it("refuses a member (403), another organization's admin (403) and no credential (401)", async () => {
    const body = { graceSeconds: 5 };
    expect((await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.member, body })).status).toBe(403);
    expect((await app.call("PATCH", "/o/acme/heartbeats/upd", { token: cast.otherAdmin, body })).status).toBe(403);
    expect((await app.call("PATCH", "/o/acme/heartbeats/upd", { body })).status).toBe(401);
    expect((await app.call("GET", "/o/acme/heartbeats/upd", { token: cast.admin })).body.graceSeconds).toBe(30);
  });
});

describe("alert after N consecutive misses", () => {
  it("is 1 unless set, takes 1 to 100, and an update moves the deadline to the last miss plus grace", async () => {
    const plain = await register(cast.admin, { name: "misses-default", expectedIntervalSeconds: 60, graceSeconds: 10 });
    expect(plain.body.alertAfterMisses).toBe(1);
    for (const alertAfterMisses of [0, -1, 1.5, 101, "three"]) {
      const res = await register(cast.admin, { name: "misses-bad", expectedIntervalSeconds: 60, graceSeconds: 10, alertAfterMisses });
      expect(res.status, String(alertAfterMisses)).toBe(400);
      if (Number.isInteger(alertAfterMisses)) expect(res.body.error).toContain("alertAfterMisses must be a whole number from 1");
    }
    const five = await register(cast.admin, { name: "misses-five", expectedIntervalSeconds: 60, graceSeconds: 10, alertAfterMisses: 5 });
    expect(five.status).toBe(201);
    expect(Date.parse(five.body.dueAt) - Date.parse(five.body.createdAt)).toBe((5 * 60 + 10) * 1000);
    expect(Date.parse(five.body.nextExpectedAt) - Date.parse(five.body.createdAt)).toBe(60 * 1000);
    const two = await app.call("PATCH", "/o/acme/heartbeats/misses-five", { token: cast.admin, body: { alertAfterMisses: 2 } });
    expect(two.status).toBe(200);
    expect(two.body).toMatchObject({ alertAfterMisses: 2, expectedIntervalSeconds: 60, graceSeconds: 10 });
    expect(Date.parse(two.body.dueAt) - Date.parse(two.body.createdAt)).toBe((2 * 60 + 10) * 1000);
    expect((await app.call("PATCH", "/o/acme/heartbeats/misses-five", { token: cast.admin, body: { alertAfterMisses: 0 } })).status).toBe(400);
    // A schedule counts scheduled times: the third hourly run after the registration, plus grace.
    const cron = await register(cast.admin, { name: "misses-cron", schedule: "0 * * * *", graceSeconds: 60, alertAfterMisses: 3 });
    expect(cron.status).toBe(201);
    const due = new Date(Date.parse(cron.body.dueAt) - 60_000);
    expect(due.getUTCMinutes()).toBe(0);
    expect(Date.parse(cron.body.nextExpectedAt)).toBe(due.getTime() - 2 * 3_600_000);
    // A ping counts the misses from itself: interval × misses + grace.
    const pinged = await ping(app, "misses-five", cast.ingestToken);
    expect(pinged.status).toBe(204);
    const read = await app.call("GET", "/o/acme/heartbeats/misses-five", { token: cast.member });
    expect(Date.parse(read.body.dueAt) - Date.parse(read.body.lastSeenAt)).toBe((2 * 60 + 10) * 1000);
    // Audit records reach the log through the heartbeats service's outbox, a moment later.
    const misses = (e: { data: { name?: string } }) => e.data.name === "misses-five";
    const updated = (await auditEvents(app, cast.owner, "heartbeat.updated", (events) => events.some(misses))).find(misses);
    expect(updated.data.alertAfterMisses).toBe(2);
  });
});

describe("ping history", () => {
  it("keeps each ping's body (its first 10 KiB, as text) and lists it with the ping", async () => {
    expect((await register(cast.admin, { name: "said", expectedIntervalSeconds: 3600, graceSeconds: 60 })).status).toBe(201);
    const post = (path: string, body?: string | Buffer) =>
      fetch(`${app.url}/o/acme/heartbeats/said/ping${path}`, { method: "POST", headers: { authorization: `Bearer ${cast.ingestToken}` }, body });
    expect((await post("", "first run: 3 files copied")).status).toBe(204);
    expect((await post("/fail", "second run: disk full\n")).status).toBe(204);
    expect((await post("", `${"x".repeat(12_000)}`)).status).toBe(204);
    expect((await post("", Buffer.from([0x66, 0x00, 0xff]))).status).toBe(204);
    expect((await post("")).status).toBe(204);
    const res = await app.call("GET", "/o/acme/heartbeats/said/pings", { token: cast.member });
    expect(res.status).toBe(200);
    const pings = res.body.pings as { kind: string; body: string; bodyCut: boolean; bodyBytes: number }[];
    expect(pings.map((p) => [p.kind, p.bodyBytes, p.bodyCut])).toEqual([
      ["success", 0, false],
      ["success", 3, false],
      ["success", 12_000, true],
      ["fail", 22, false],
      ["success", 25, false],
    ]);
    expect(pings[0]!.body).toBe("");
    // Not text: its size only, as on the heartbeat's latest ping.
    expect(pings[1]!.body).toBe("");
    expect(pings[2]!.body).toBe("x".repeat(10_240));
    expect(pings[3]!.body).toBe("second run: disk full\n");
    expect(pings[4]!.body).toBe("first run: 3 files copied");
  });
});

describe("delete", () => {
  it("is admin only, answers 204, and the name is free again", async () => {
    await register(cast.admin, { name: "del", expectedIntervalSeconds: 60, graceSeconds: 10 });
    expect((await app.call("DELETE", "/o/acme/heartbeats/del", { token: cast.member })).status).toBe(403);
    expect((await app.call("DELETE", "/o/acme/heartbeats/del", { token: cast.otherAdmin })).status).toBe(403);
    expect((await app.call("DELETE", "/o/acme/heartbeats/del")).status).toBe(401);
    const res = await app.call("DELETE", "/o/acme/heartbeats/del", { token: cast.admin });
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
    expect((await app.call("GET", "/o/acme/heartbeats/del", { token: cast.admin })).status).toBe(404);
    expect((await app.call("DELETE", "/o/acme/heartbeats/del", { token: cast.admin })).status).toBe(404);
    expect((await register(cast.owner, { name: "del", expectedIntervalSeconds: 60, graceSeconds: 10 })).status).toBe(201);
    expect((await app.call("DELETE", "/o/acme/heartbeats/del", { token: cast.owner })).status).toBe(204);
  });

  it("writes register, update and delete to the audit log", async () => {
    // They reach the log through the heartbeats service's outbox, a moment later.
    for (const kind of ["heartbeat.registered", "heartbeat.updated", "heartbeat.deleted"]) {
      expect(await auditEvents(app, cast.owner, kind), kind).not.toEqual([]);
    }
  });
});

describe("ping", () => {
  beforeAll(async () => {
    await register(cast.admin, { name: "pinged", expectedIntervalSeconds: 60, graceSeconds: 30 });
  });

  it("answers 204 with no body and sets lastSeenAt to the database's now", async () => {
    const before = (await db<{ now: Date }[]>`select now()`)[0]!.now;
    const res = await ping(app, "pinged", cast.ingestToken);
    expect(res.status).toBe(204);
    expect(res.text).toBe("");
    const after = (await db<{ now: Date }[]>`select now()`)[0]!.now;
    const read = await app.call("GET", "/o/acme/heartbeats/pinged", { token: cast.member });
    const seen = Date.parse(read.body.lastSeenAt);
    expect(seen).toBeGreaterThanOrEqual(before.getTime());
    expect(seen).toBeLessThanOrEqual(after.getTime());
    expect(Date.parse(read.body.dueAt) - seen).toBe(90_000);
  });

  it("is safe to repeat: every ping answers 204 and only the latest is kept", async () => {
    const first = (await app.call("GET", "/o/acme/heartbeats/pinged", { token: cast.member })).body.lastSeenAt;
    const answers = await Promise.all(Array.from({ length: 10 }, () => ping(app, "pinged", cast.ingestToken)));
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(204));
    const latest = (await app.call("GET", "/o/acme/heartbeats/pinged", { token: cast.member })).body.lastSeenAt;
    expect(Date.parse(latest)).toBeGreaterThan(Date.parse(first));
    const rows = await db`select last_seen_at from heartbeats.heartbeats where name = 'pinged'`;
    expect(rows).toHaveLength(1);
  });

  it("gives one identical rejection for a missing token, another organization's token, an unknown name and a wrong token", async () => {
    const cases = {
      missingToken: await ping(app, "pinged", undefined),
      otherOrganizationsToken: await ping(app, "pinged", cast.otherIngestToken),
      unknownName: await ping(app, "no-such-heartbeat", cast.ingestToken),
      wrongToken: await ping(app, "pinged", "f".repeat(64)),
      malformedToken: await ping(app, "pinged", "not-a-token"),
      sessionInsteadOfIngestToken: await ping(app, "pinged", cast.owner),
      unknownOrganization: await ping(app, "pinged", cast.ingestToken, "no-such-org"),
    };
    for (const [what, answer] of Object.entries(cases)) {
      expect({ what, ...answer }).toEqual({ what, status: 404, text: '{"error":"not found"}', contentType: "application/json; charset=utf-8" });
    }
    // None of them touched the heartbeat.
    const seen = (await app.call("GET", "/o/acme/heartbeats/pinged", { token: cast.member })).body.lastSeenAt;
    await ping(app, "pinged", cast.otherIngestToken);
    expect((await app.call("GET", "/o/acme/heartbeats/pinged", { token: cast.member })).body.lastSeenAt).toBe(seen);
  });

  it("does the same database work for every rejection, so no answer comes sooner than another", async () => {
    // The service runs behind a relay that reads which statements it executes. A shortcut (a
    // refusal that skips the token lookup or the update) would show as a missing statement; the
    // clock is never asked, so a busy machine cannot fail this.
    const database = await freshDatabase();
    const tap = await startPgWireTap(database.url);
    const tapped = await startApp({ databaseUrl: tap.url });
    try {
      const tappedCast = await castOf(tapped);
      expect(
        (await tapped.call("POST", "/o/acme/heartbeats", { token: tappedCast.admin, body: { name: "pinged", expectedIntervalSeconds: 60, graceSeconds: 30 } }))
          .status,
      ).toBe(201);
      const kinds = {
        missingToken: () => ping(tapped, "pinged", undefined),
        otherOrganizationsToken: () => ping(tapped, "pinged", tappedCast.otherIngestToken),
        unknownName: () => ping(tapped, "no-such-heartbeat", tappedCast.ingestToken),
        wrongToken: () => ping(tapped, "pinged", "e".repeat(64)),
      };
      // Background work (sweeps, relays) shares the connections and can only add statements, so
      // each kind's fewest over several rounds is its own work. The outbox relays run four times a
      // second per schema: on a loaded machine one fell into every round of one kind, so their
      // statements are left out first.
      const relay = /outbox_relay_lease|\.outbox\b/;
      const fewest: Record<string, string[]> = {};
      for (let round = 0; round < 8; round++) {
        for (const [name, call] of Object.entries(kinds)) {
          tap.take();
          expect((await call()).status).toBe(404);
          const statements = tap.take().filter((s) => !relay.test(s));
          if (!fewest[name] || statements.length < fewest[name].length) fewest[name] = statements;
        }
      }
      // Each one ran the ping's statement, which looks the heartbeat up and updates it (no match).
      for (const [name, statements] of Object.entries(fewest))
        expect({ name, pinged: statements.some((s) => s.includes("update heartbeats.heartbeats")) }).toEqual({ name, pinged: true });
      const reference = fewest.wrongToken;
      for (const [name, statements] of Object.entries(fewest)) expect({ name, statements }).toEqual({ name, statements: reference });
    } finally {
      await tapped.stop();
      await tap.close();
      await database.drop();
    }
  });

  it("is refused for a heartbeat of another organization with that organization's slug but this token", async () => {
    await register(cast.otherAdmin, { name: "globex-job", expectedIntervalSeconds: 60, graceSeconds: 30 }, "globex");
    const res = await ping(app, "globex-job", cast.ingestToken, "globex");
    expect(res.status).toBe(404);
    expect((await ping(app, "globex-job", cast.otherIngestToken, "globex")).status).toBe(204);
  });
});

describe("heartbeats created by the organization's ping key", () => {
  it("stop at the cap per organization: 409 saying the cap and what to do, exactly the cap under concurrency", async () => {
    const issued = await app.call("POST", "/o/globex/ping-key", { token: cast.otherAdmin, body: { allowCreate: true } });
    expect(issued.body.allowCreate).toBe(true);
    const base = issued.body.pingUrlBase as string;
    // The organization two short of the cap, filled in the database as an operator's import would.
    await register(cast.otherAdmin, { name: "globex-seed", expectedIntervalSeconds: 60, graceSeconds: 30 }, "globex");
    const [seed] = await db<{ org_id: string }[]>`select org_id from heartbeats.heartbeats where name = 'globex-seed'`;
    const [before] = await db<{ count: number }[]>`select count(*)::int as count from heartbeats.heartbeats where org_id = ${seed!.org_id}`;
    await db`
      insert into heartbeats.heartbeats (org_id, org_slug, name, expected_interval_seconds, grace_seconds, deadline)
      select ${seed!.org_id}, 'globex', 'filled-' || g, 300, 60, now() + interval '1 day'
      from generate_series(1, ${HEARTBEATS_PER_ORG - 2 - before!.count}) g`;

    const answers = await Promise.all(
      Array.from({ length: 5 }, async (_, i) => {
        const res = await fetch(`${base}/auto-${i}?create=1`, { method: "POST" });
        return { status: res.status, text: await res.text() };
      }),
    );
    expect(answers.filter((a) => a.status === 201)).toHaveLength(2);
    const refused = answers.filter((a) => a.status === 409);
    expect(refused).toHaveLength(3);
    expect(refused[0]!.text).toContain(`${HEARTBEATS_PER_ORG}`);
    expect(refused[0]!.text).toContain("delete");
    const [after] = await db<{ count: number }[]>`select count(*)::int as count from heartbeats.heartbeats where org_id = ${seed!.org_id}`;
    expect(after!.count).toBe(HEARTBEATS_PER_ORG);
    // An existing heartbeat still takes its pings by name.
    expect((await fetch(`${base}/globex-seed?create=1`)).status).toBe(200);
  });
});
