import http from "node:http";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OWNER } from "../support/app.js";
import { issueCredentials, MODES, postTrigger, startIntakeApp, unique, type Credentials, type IntakeApp } from "../e2e/triggers-kit.js";

/**
 * A delivery takes an in-flight slot only once its credential is checked and its body is read:
 * complete deliveries with a wrong credential, however many one address keeps in flight, never
 * take what an authenticated sender from another address needs. The attacker's deliveries are kept
 * in flight by a lock on the failed-credential counter they all update, so the test does not
 * depend on timing; the healthy sender is 127.0.0.1.
 */
const ATTACKER = "127.0.0.2";
/** Deliveries the process takes in flight over every organization (INTAKE_IN_FLIGHT), and the attacker's: more. */
const IN_FLIGHT = 8;
const ATTACKERS = 10;
/** The gateway's memory bound for bodies held; one address may hold a quarter of it. */
const HELD_BYTES = 4 * 1024 * 1024;
const PER_ADDRESS_BYTES = HELD_BYTES / 4;
/** Longest the test waits for the attack to be in place; a hang bound, not a budget. */
const SETTLE_BOUND_MS = 20_000;

const alertBody = (run: string, i: number) => ({
  title: `Wrong-credential flood probe ${run} ${i}`,
  alert_id: `${run}-${i}`,
  alert_transition: "Triggered",
  alert_type: "error",
  alert_priority: "P3",
  event_id: `${run}-e${i}`,
});

/** A complete delivery from `localAddress` with `body` and a wrong credential; resolves with its status. */
function wrongCredential(url: string, path: string, body: string, localAddress = ATTACKER): Promise<{ status: number; retryAfter?: string; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}${path}`,
      {
        method: "POST",
        localAddress,
        agent: false,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), authorization: "Bearer not-the-secret" },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers["retry-after"], text }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe.each(MODES)("a flood of complete deliveries with a wrong credential (%s)", (mode) => {
  let app: IntakeApp;
  let creds: Credentials;
  let sql: postgres.Sql;
  let sourcePath: string;

  beforeAll(async () => {
    app = await startIntakeApp(mode, {
      env: {
        INTAKE_IN_FLIGHT: String(IN_FLIGHT),
        INTAKE_MAX_WAITING: "0",
        GATEWAY_DELIVERY_BYTES: String(HELD_BYTES),
        // Each stuck delivery holds a connection while it waits on the lock.
        DATABASE_POOL_SIZE: "24",
      },
    });
    creds = await issueCredentials(app);
    sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
    const created = await app.call("POST", `/o/${OWNER.org}/custom-sources`, {
      token: creds.owner,
      body: { name: unique("flood").toLowerCase(), rules: [{ name: "main", title: "body.title" }] },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    sourcePath = `/triggers/custom/${created.body.source.id}`;
  }, 180_000);

  afterAll(async () => {
    await sql?.end();
    await app?.stop();
  });

  /**
   * Runs `attack` while every failed credential waits on a held lock (so each wrong-credential
   * delivery stays in flight), once `waiting` of them are stuck there; releases the lock after.
   */
  async function withFailuresHeld<T>(waiting: number, attack: () => Promise<T>[], during: (attacks: Promise<T>[]) => Promise<void>): Promise<T[]> {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const hold = sql.begin(async (tx) => {
      await tx`lock table intake.receiver_failures in exclusive mode`;
      locked();
      await released;
    });
    await isLocked;
    const attacks = attack();
    try {
      const stuck = async () =>
        (
          await sql<{ n: number }[]>`
            select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%intake.receiver_failures%'`
        )[0]?.n ?? 0;
      for (const until = Date.now() + SETTLE_BOUND_MS; (await stuck()) < waiting && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50));
      expect(await stuck(), "the wrong-credential deliveries are in flight, waiting on the held lock").toBe(waiting);
      await during(attacks);
    } finally {
      release();
      await hold;
    }
    return Promise.all(attacks);
  }

  it("leaves an authenticated trigger from another address answered, however many the attacker keeps in flight", async () => {
    const run = unique("flood");
    const small = JSON.stringify({ title: "not mine" });
    const answers = await withFailuresHeld(
      ATTACKERS,
      () => Array.from({ length: ATTACKERS }, () => wrongCredential(app.url, sourcePath, small)),
      async () => {
        const healthy = await Promise.all(Array.from({ length: 5 }, (_, i) => postTrigger(app, creds.ingestToken, alertBody(run, i))));
        expect(healthy.map((a) => `${a.status} ${JSON.stringify(a.body).slice(0, 200)}`)).toEqual(Array(5).fill(expect.stringMatching(/^201 /)));
      },
    );
    // Once counted, each was answered as a wrong credential (fewer than the 10 failures a minute an
    // address may have): nothing was refused for load.
    expect(answers.map((a) => a.status)).toEqual(Array(ATTACKERS).fill(401));
  }, 120_000);

  it("holds one address's complete bodies to its part of the gateway's memory bound, refused as memory, not as overload", async () => {
    const run = unique("memory");
    // Each attacking body is a fifth of the address's part: four fit, the rest are refused at once.
    const large = JSON.stringify({ title: "x".repeat(PER_ADDRESS_BYTES / 5 - 20) });
    const fits = Math.floor(PER_ADDRESS_BYTES / Buffer.byteLength(large));
    const answers = await withFailuresHeld(
      fits,
      () => Array.from({ length: fits + 6 }, () => wrongCredential(app.url, sourcePath, large, "127.0.0.3")),
      async () => {
        const healthy = await Promise.all(Array.from({ length: 3 }, (_, i) => postTrigger(app, creds.ingestToken, alertBody(run, i))));
        expect(healthy.map((a) => `${a.status} ${JSON.stringify(a.body).slice(0, 200)}`)).toEqual(Array(3).fill(expect.stringMatching(/^201 /)));
      },
    );
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([...Array(fits).fill(401), ...Array(6).fill(429)].sort());
    const memory = answers.find((a) => a.status === 429)!;
    expect(memory.retryAfter).toBe("1");
    expect(memory.text).toContain("held in memory");
    // The metric names the bound that refused them: memory, never load.
    const metricsUrl = mode === "one process" ? app.process.metricsUrl! : undefined;
    if (metricsUrl) {
      const text = await (await fetch(metricsUrl)).text();
      expect(text).toMatch(/warroom_trigger_deliveries_refused_total\{[^}]*reason="memory"[^}]*\} 6\n/);
      expect(text).not.toMatch(/warroom_trigger_deliveries_refused_total\{[^}]*reason="overload"/);
    }
  }, 120_000);
});
