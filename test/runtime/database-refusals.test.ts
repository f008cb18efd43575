import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_DATABASE_URL, OWNER, startApp, type TestApp } from "../support/app.js";

/**
 * A Postgres that refuses new connections for a while ("too many clients", SQLSTATE 53300: its
 * max_connections, or the role's connection limit, is used up) is a dependency that is
 * unavailable, not a bug: callers get 503 and may retry, and the service recovers by itself.
 */

const role = `wr_limited_${randomBytes(4).toString("hex")}`;
const database = `${role}_db`;
// The test servers ask for a password (scram-sha-256), as a stock Postgres does.
const rolePassword = randomBytes(12).toString("hex");
let admin: postgres.Sql;
let app: TestApp;
let owner: string;

beforeAll(async () => {
  admin = postgres(ADMIN_DATABASE_URL, { max: 1, onnotice: () => {} });
  // Connection limits do not apply to superusers, so the service runs as a role of its own.
  await admin.unsafe(`create role ${role} login password '${rolePassword}'`);
  await admin.unsafe(`create database ${database} owner ${role}`);
  const url = new URL(ADMIN_DATABASE_URL);
  url.username = role;
  url.password = rolePassword;
  url.pathname = `/${database}`;
  app = await startApp({ databaseUrl: url.toString() });
  owner = await app.ownerToken();
});

afterAll(async () => {
  await app?.stop();
  await admin?.unsafe(`drop database if exists ${database} with (force)`).catch(() => {});
  await admin?.unsafe(`drop role if exists ${role}`).catch(() => {});
  await admin?.end();
});

describe("a database that refuses connections", () => {
  it("answers 503 with Retry-After while Postgres refuses with too many clients, and recovers when it accepts again", async () => {
    expect((await app.call("GET", `/o/${OWNER.org}/incidents`, { token: owner })).status).toBe(200);
    const issued = await app.call("POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: owner });
    expect(issued.status).toBeLessThan(300);
    const ingestToken: string = issued.body.token;

    await admin.unsafe(`alter role ${role} connection limit 0`);
    await admin`select pg_terminate_backend(pid) from pg_stat_activity where usename = ${role}`;
    // The first calls may meet a connection as it is ended (57P01); the ones after it meet the
    // refusal of a new connection.
    for (let i = 0; i < 5; i++) {
      const refused = await app.call("GET", `/o/${OWNER.org}/incidents`, { token: owner });
      expect(refused.status).toBe(503);
      expect(refused.body).toEqual({ error: "unavailable" });
      // Overload is retryable, and says when.
      expect(refused.headers.get("retry-after")).toBe("2");
    }
    // A delivery meets the same refusal: 503 with Retry-After, never 500. (On a machine too busy
    // to answer within the gateway's call deadline, 15 s, the deadline's own 504 comes first: a
    // refusal senders retry as well. It answers in milliseconds otherwise.)
    const delivery = await app.call("POST", "/triggers", {
      token: ingestToken,
      body: { alert_type: "error", title: "Disk full", alert_id: "disk-1", event_id: "e-1", tags: ["service:db"] },
    });
    expect([503, 504]).toContain(delivery.status);
    if (delivery.status === 503) expect(delivery.headers.get("retry-after")).toBe("2");

    await admin.unsafe(`alter role ${role} connection limit -1`);
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    let status = 0;
    while (status !== 200 && Date.now() < deadline) {
      status = (await app.call("GET", `/o/${OWNER.org}/incidents`, { token: owner })).status;
      if (status !== 200) await new Promise((r) => setTimeout(r, 200));
    }
    expect(status).toBe(200);
  });
});
