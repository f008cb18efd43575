import { randomBytes, scryptSync } from "node:crypto";
import { lookup } from "node:dns/promises";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOGIN_THROTTLE } from "../../services/identity/login-throttle.js";
import { DEFAULT_PARAMS } from "../../services/identity/passwords.js";
import { OWNER, startApp, type TestApp } from "../support/app.js";

/** Login resists guessing: backoff and 429 per account and per address, strong hashes, and a free libuv pool. */
describe("login", () => {
  let app: TestApp;
  let db: postgres.Sql;
  let owner: string;

  beforeAll(async () => {
    // The default cost, not the test run's cheaper one (vitest.config.ts): the floods below fill the
    // hashing queue, and a hash made with a lower cost is upgraded to it.
    app = await startApp({ env: { TRUSTED_PROXY_CIDRS: "127.0.0.1/32", PASSWORD_SCRYPT_N: String(DEFAULT_PARAMS.N) } });
    db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    owner = await app.ownerToken();
    for (const email of ["target@acme.test", "upgrade@acme.test"]) {
      expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "the-right-one", role: "member" } })).status).toBe(201);
    }
  });
  afterAll(async () => {
    await db?.end();
    await app?.stop();
  });

  const login = (email: string, password: string, from: string) =>
    app.call("POST", "/auth/login", { body: { email, password, orgSlug: "acme" }, headers: { "x-forwarded-for": from } });

  it("backs off one (organization, email) after the documented number of failures, but not from where it logged in before", async () => {
    expect((await login("target@acme.test", "the-right-one", "192.0.2.200")).status).toBe(200);
    const statuses: number[] = [];
    for (let i = 0; i < LOGIN_THROTTLE.accountFreeFailures - 1; i++) statuses.push((await login("target@acme.test", `guess-${i}`, `192.0.2.${i + 1}`)).status);
    // The last free failure reserves its count (and starts the lock) before its password is hashed:
    // the next attempt, sent while it is checked, is within the lock however slow the machine is.
    const last = login("target@acme.test", "guess-last", `192.0.2.${LOGIN_THROTTLE.accountFreeFailures}`);
    await new Promise((r) => setTimeout(r, 150));
    // Locked now for an address that failed, even with the right password, and for an address the
    // account has never logged in from, even one that has not failed: nothing is hashed.
    const [locked, stranger] = await Promise.all([
      login("target@acme.test", "the-right-one", "192.0.2.1"),
      login("target@acme.test", "the-right-one", "192.0.2.203"),
    ]);
    statuses.push((await last).status);
    expect(statuses).toEqual(Array(LOGIN_THROTTLE.accountFreeFailures).fill(401));
    expect(locked.status).toBe(429);
    expect(Number(locked.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(stranger.status).toBe(429);
    // Never for an address the account has logged in from: a stranger's guesses do not lock the person out.
    expect((await login("target@acme.test", "the-right-one", "192.0.2.200")).status).toBe(200);
    // Other accounts are not affected.
    expect((await login(OWNER.email, OWNER.password, "192.0.2.201")).status).toBe(200);
    // Success cleared the account's failures.
    expect((await login("target@acme.test", "wrong again", "192.0.2.202")).status).toBe(401);
    expect((await login("target@acme.test", "the-right-one", "192.0.2.202")).status).toBe(200);
  });

  it("backs off one client address guessing across many accounts", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < LOGIN_THROTTLE.addressFreeFailures - 1; i++) statuses.push((await login(`nobody${i}@acme.test`, "guess", "198.51.100.66")).status);
    const last = login("nobody-last@acme.test", "guess", "198.51.100.66");
    await new Promise((r) => setTimeout(r, 150));
    const locked = await login(OWNER.email, OWNER.password, "198.51.100.66");
    statuses.push((await last).status);
    expect(statuses).toEqual(Array(LOGIN_THROTTLE.addressFreeFailures).fill(401));
    expect(locked.status).toBe(429);
    expect((await login(OWNER.email, OWNER.password, "198.51.100.67")).status).toBe(200);
  }, 120_000);

  it("upgrades a hash made with older scrypt parameters at the next successful login", async () => {
    const salt = randomBytes(16);
    const key = scryptSync("old-params-pass", salt, 32, { N: 16384, r: 8, p: 1 });
    const old = `scrypt$16384$8$1$${salt.toString("base64")}$${key.toString("base64")}`;
    await db`update identity.memberships set password_hash = ${old}
             where user_id = (select id from identity.users where email = 'upgrade@acme.test')`;
    expect((await login("upgrade@acme.test", "old-params-pass", "192.0.2.50")).status).toBe(200);
    const [row] = await db<{ password_hash: string }[]>`
      select password_hash from identity.memberships where user_id = (select id from identity.users where email = 'upgrade@acme.test')`;
    expect(row!.password_hash).toMatch(/^scrypt\$131072\$8\$1\$/);
    expect((await login("upgrade@acme.test", "old-params-pass", "192.0.2.50")).status).toBe(200);
  });

  it("refuses at once (429) a login whose hash could not end before the caller's own deadline, instead of answering after it", async () => {
    // Over Connect the caller sets its deadline; a hash at the default cost takes far longer than
    // 20 ms. (The gateway's REST routes give each call 15 s, which a flood's queue can pass.) The
    // hashing queue refuses it (429), unless a loaded machine took the 20 ms before the login
    // reached the queue: then the call ends at its deadline (504 deadline_exceeded).
    const answer = await app.call("POST", "/warroom.identity.v1.IdentityService/Login", {
      body: { email: OWNER.email, password: OWNER.password, orgSlug: "acme" },
      headers: { "connect-timeout-ms": "20", "x-forwarded-for": "192.0.2.90" },
    });
    if (answer.status === 504) expect(answer.body).toMatchObject({ code: "deadline_exceeded" });
    else {
      expect(answer.status, JSON.stringify(answer.body)).toBe(429);
      expect(JSON.stringify(answer.body)).toContain("too many password checks in progress; retry shortly");
    }
    // Refused for capacity, not a failed login: the same address logs in at once with time to hash.
    expect((await login(OWNER.email, OWNER.password, "192.0.2.90")).status).toBe(200);
  });

  it("a login flood does not starve DNS lookups of the process", async () => {
    const started = performance.now();
    let answered = 0;
    const flood = Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        login(OWNER.email, OWNER.password, `203.0.113.${i + 1}`).then((res) => {
          // Refusals (429) come at once by design; only a login that hashed counts.
          if (res.status === 200) answered++;
          return res;
        }),
      ),
    );
    await new Promise((r) => setTimeout(r, 50));
    const lookupStarted = performance.now();
    await lookup("localhost");
    const lookupMs = performance.now() - lookupStarted;
    // No clock decides it: a lookup that waited behind the hashing would come after (nearly) the
    // whole flood; it comes while most logins still wait for their hash, however slow the machine.
    const answeredBeforeLookup = answered;
    const answers = await flood;
    const floodMs = performance.now() - started;
    // Answered, or refused at once when the hashing queue is full: never left to time out.
    expect(answers.map((a) => a.status).filter((s) => s !== 200 && s !== 429)).toEqual([]);
    expect(answers.some((a) => a.status === 200)).toBe(true);
    console.log(
      `flood of 16 logins: ${Math.round(floodMs)} ms; a DNS lookup during it: ${lookupMs.toFixed(1)} ms, ` +
        `with ${answeredBeforeLookup} of the logins that hashed answered before it`,
    );
    expect(answeredBeforeLookup).toBeLessThanOrEqual(answers.filter((a) => a.status === 200).length / 2);
  }, 120_000);

  it("refuses logins past the hashing queue at once instead of letting them time out", async () => {
    const started = performance.now();
    // Each attempt reserves a failure until its hash says otherwise, so a burst at one account from
    // addresses it never logged in from meets the account's lock as well as the hash queue: every
    // refusal is one or the other, answered at once with when to come back.
    const answers = await Promise.all(Array.from({ length: 64 }, (_, i) => login(OWNER.email, OWNER.password, `203.0.113.${100 + i}`)));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);
    const refused = answers.filter((a) => a.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    for (const answer of refused) {
      expect(JSON.stringify(answer.body)).toMatch(/too many password checks in progress|too many failed logins/);
      expect(Number(answer.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    }
    console.log(
      `64 logins at once: ${statuses.filter((s) => s === 200).length} answered, ${refused.length} refused, in ${Math.round(performance.now() - started)} ms`,
    );
  }, 120_000);
});
