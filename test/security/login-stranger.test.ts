import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOGIN_THROTTLE } from "../../services/identity/login-throttle.js";
import { DEFAULT_PARAMS } from "../../services/identity/passwords.js";
import { callApi, OWNER, startApp, type TestApp } from "../support/app.js";
import { startPrivateNats } from "../support/nats-server.js";

/** The floods below fill the hashing queue: at the default cost, not the test run's cheaper one (vitest.config.ts). */
const PRODUCTION_COST = { TRUSTED_PROXY_CIDRS: "127.0.0.1/32", PASSWORD_SCRYPT_N: String(DEFAULT_PARAMS.N) };

/**
 * Nobody is locked out of login by a stranger, and the login limits are exact: each attempt
 * reserves its failure before the password is hashed, on any replica.
 */
/**
 * Checks wrong logins against the limit: at least the free failures were checked (401) or refused
 * for capacity (429, "password checks": no failure, its reservation given back), and past the free
 * ones each further checked failure came only after the lock before it had run out (the documented
 * backoff: a slow machine may take longer than the 1 s lock to answer them all). The rest were
 * refused by the lock (429, "failed logins") before any hashing.
 */
/**
 * A login's answer, with when it was sent and when its answer came: the server checked it in
 * between, so a lock's length is bounded from below by one answer's arrival minus the sending of
 * the one before it, whatever the machine's load did to either.
 */
interface Timed {
  status: number;
  body: any;
  headers: Headers;
  sentAt: number;
  at: number;
}

async function timed(call: Promise<{ status: number; body: any; headers: Headers }>): Promise<Timed> {
  const sentAt = Date.now();
  const answer = await call;
  return { ...answer, sentAt, at: Date.now() };
}

function expectExactLimit(answers: Timed[], free: number): void {
  const busy = (a: { status: number; body: any }) => a.status === 429 && /password checks/.test(a.body?.error ?? "");
  const locked = (a: { status: number; body: any }) => a.status === 429 && /failed logins/.test(a.body?.error ?? "");
  expect(
    answers.filter((a) => a.status !== 401 && !busy(a) && !locked(a)),
    JSON.stringify(answers.map((a) => a.body)),
  ).toEqual([]);
  const failures = answers.filter((a) => a.status === 401).sort((x, y) => x.at - y.at);
  expect(failures.length + answers.filter(busy).length).toBeGreaterThanOrEqual(free);
  // Past the free ones, each further failure was checked after the lock its predecessor set (1 s,
  // 2 s, ...) had run out: its answer came at least that long after the predecessor was sent.
  for (let k = free; k < failures.length; k++) expect(failures[k]!.at - failures[k - 1]!.sentAt).toBeGreaterThanOrEqual(1000 * 2 ** (k - free));
}

describe("login a stranger cannot deny", () => {
  let app: TestApp;
  let owner: string;

  beforeAll(async () => {
    app = await startApp({ env: PRODUCTION_COST });
    owner = await app.ownerToken();
    for (const email of ["victim@acme.test", "exact@acme.test", "flooded@acme.test"]) {
      expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "the-right-one", role: "member" } })).status).toBe(201);
    }
  });
  afterAll(async () => {
    await app?.stop();
  });

  const login = (email: string, password: string, from: string, url = app.url) =>
    callApi(url, "POST", "/auth/login", { body: { email, password, orgSlug: "acme" }, headers: { "x-forwarded-for": from } });

  it("accepts the right password from an address the account logged in from, after another address's failures", async () => {
    expect((await login("victim@acme.test", "the-right-one", "192.0.2.78")).status).toBe(200);
    for (let i = 0; i < 9; i++) await login("victim@acme.test", `guess-${i}`, "192.0.2.77");
    expect((await login("victim@acme.test", "the-right-one", "192.0.2.77")).status).toBe(429);
    const real = await login("victim@acme.test", "the-right-one", "192.0.2.78");
    expect(real.status, JSON.stringify(real.body)).toBe(200);
  });

  it("lets exactly the limit of 40 concurrent wrong logins for one account through, the rest 429", async () => {
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => timed(login("exact@acme.test", `wrong-${i}`, "192.0.2.90"))));
    expectExactLimit(answers, LOGIN_THROTTLE.pairFreeFailures);
    expect(answers.filter((a) => a.status === 401).length).toBeLessThanOrEqual(LOGIN_THROTTLE.pairFreeFailures + 3);
  }, 120_000);

  it("keeps logins from another address working during a flood of bad logins from one (24 workers), and throttles every bad one", async () => {
    // Where the person logged in before: hashed ahead of the flood however slow the machine is.
    expect((await login("flooded@acme.test", "the-right-one", "198.51.100.24")).status).toBe(200);
    const attacker = "198.51.100.23";
    const until = Date.now() + 8_000;
    const bad: number[] = [];
    const workers = Array.from({ length: 24 }, async (_, w) => {
      for (let i = 0; Date.now() < until; i++) bad.push((await login(`nobody-${w}-${i}@acme.test`, "guess", attacker)).status);
    });
    const good: number[] = [];
    await new Promise((r) => setTimeout(r, 1500));
    for (let i = 0; i < 4; i++) {
      good.push((await login("flooded@acme.test", "the-right-one", "198.51.100.24")).status);
      await new Promise((r) => setTimeout(r, 1200));
    }
    await Promise.all(workers);
    console.log(`good logins ${JSON.stringify(good)}; bad: ${bad.filter((s) => s === 401).length} x 401, ${bad.filter((s) => s === 429).length} x 429`);
    expect(good.filter((s) => s === 200).length).toBeGreaterThanOrEqual(3);
    // Each bad login was checked against the address's limit: past its free failures, only one more
    // per lock that ran out (1 s, 2 s and 4 s in 8 s; at most four however long the good logins took).
    expect(bad.filter((s) => s !== 401 && s !== 429)).toEqual([]);
    expect(bad.filter((s) => s === 401).length).toBeLessThanOrEqual(LOGIN_THROTTLE.addressFreeFailures + 4);
  }, 120_000);
});

describe("login limits over NATS with two gateway replicas", () => {
  let a: TestApp;
  let b: TestApp;
  let nats: Awaited<ReturnType<typeof startPrivateNats>>;

  beforeAll(async () => {
    nats = await startPrivateNats();
    a = await startApp({ nats: nats.url, env: PRODUCTION_COST });
    b = await startApp({ nats: nats.url, databaseUrl: a.databaseUrl, env: PRODUCTION_COST });
    const owner = await a.ownerToken();
    expect(
      (await a.call("POST", "/o/acme/members", { token: owner, body: { email: "replicas@acme.test", password: "the-right-one", role: "member" } })).status,
    ).toBe(201);
  }, 120_000);
  afterAll(async () => {
    await b?.stop();
    await a?.stop();
    await nats?.cleanup();
  });

  it("lets exactly the limit of 40 concurrent wrong logins through, split over both replicas", async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        timed(
          callApi(i % 2 ? a.url : b.url, "POST", "/auth/login", {
            body: { email: "replicas@acme.test", password: `wrong-${i}`, orgSlug: OWNER.org },
            headers: { "x-forwarded-for": "192.0.2.91" },
          }),
        ),
      ),
    );
    expectExactLimit(answers, LOGIN_THROTTLE.pairFreeFailures);
  }, 120_000);
});

/**
 * A distributed guesser (a new client address for every request) can neither guess one account
 * without limit nor deny the real person: the account's limit refuses guesses from addresses the
 * account has never logged in from, and a login from an address it has logged in from (the second
 * factor of evidence) is limited only per address and hashed ahead of the flood.
 */
describe("login under a distributed flood", () => {
  let app: TestApp;
  let next = 0;
  // Addresses from a /16 the test walks through: each request its own.
  const fresh = () => {
    next++;
    return `10.${1 + (next >> 16)}.${(next >> 8) & 255}.${next & 255}`;
  };

  beforeAll(async () => {
    app = await startApp({ env: PRODUCTION_COST });
    const owner = await app.ownerToken();
    for (const email of ["guessed@acme.test", "busy@acme.test", "unseen@acme.test"]) {
      expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email, password: "the-right-one", role: "member" } })).status).toBe(201);
    }
  });
  afterAll(async () => {
    await app?.stop();
  });

  const login = (email: string, password: string, from: string) =>
    callApi(app.url, "POST", "/auth/login", { body: { email, password, orgSlug: "acme" }, headers: { "x-forwarded-for": from } });
  const failedLogins = (a: { status: number; body: any }) => a.status === 429 && /failed logins/.test(a.body?.error ?? "");
  const passwordChecks = (a: { status: number; body: any }) => a.status === 429 && /password checks/.test(a.body?.error ?? "");

  it("checks only the account's limit of 30 guesses from 30 fresh addresses; the owner's known address still gets in", async () => {
    const home = "192.0.2.150";
    expect((await login("guessed@acme.test", "the-right-one", home)).status).toBe(200);
    // One after another, so that none waits for the hashing queue: each is checked unless the account's limit refuses it.
    const answers: Timed[] = [];
    for (let i = 0; i < 30; i++) answers.push(await timed(login("guessed@acme.test", `guess-${i}`, fresh())));
    const checked = answers.filter((a) => a.status === 401).length;
    console.log(
      `30 guesses from fresh addresses: ${checked} checked, ${answers.filter(failedLogins).length} refused by the account's limit, ${answers.filter(passwordChecks).length} for capacity`,
    );
    expectExactLimit(answers, LOGIN_THROTTLE.accountFreeFailures);
    // An address the account has never logged in from is refused even with the right password while
    // the account is locked ...
    const lastChecked = answers
      .filter((a) => a.status === 401)
      .sort((x, y) => x.at - y.at)
      .at(-1)!;
    const lockMs = 1000 * 2 ** (checked - LOGIN_THROTTLE.accountFreeFailures);
    const stranger = await timed(login("guessed@acme.test", "the-right-one", fresh()));
    if (stranger.at < lastChecked.sentAt + lockMs || stranger.status !== 200) {
      expect(stranger.status, JSON.stringify(stranger.body)).toBe(429);
      expect(stranger.body.error).toMatch(/failed logins/);
      expect(Number(stranger.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    } else {
      // ... and checked only once the lock has run out: on a loaded machine the refused guesses
      // above can outlast it (the lock is 1 s after the free failures, doubling with each checked
      // one after them). Its answer came at least a lock's length after the last checked guess was sent.
      expect(stranger.at - lastChecked.sentAt).toBeGreaterThanOrEqual(lockMs);
    }
    // ... but the owner, from where they logged in before, is let through.
    const owner = await login("guessed@acme.test", "the-right-one", home);
    expect(owner.status, JSON.stringify(owner.body)).toBe(200);
  }, 120_000);

  it("keeps the owner's logins working under 24 concurrent wrong logins from rotating addresses, and a refusal for capacity is no failure", async () => {
    const home = "192.0.2.160";
    expect((await login("busy@acme.test", "the-right-one", home)).status).toBe(200);
    const away = "192.0.2.161";
    let flooding = true;
    const bad: number[] = [];
    const workers = Array.from({ length: 24 }, async (_, w) => {
      for (let i = 0; flooding; i++) bad.push((await login(`nobody-${w}-${i}@acme.test`, "guess", fresh())).status);
    });
    const good: number[] = [];
    const unseen: { status: number; body: any }[] = [];
    try {
      await new Promise((r) => setTimeout(r, 1500));
      for (let i = 0; i < 8; i++) {
        const [fromHome, fromAway] = await Promise.all([login("busy@acme.test", "the-right-one", home), login("unseen@acme.test", "the-right-one", away)]);
        good.push(fromHome.status);
        unseen.push(fromAway);
        await new Promise((r) => setTimeout(r, 500));
      }
    } finally {
      flooding = false;
      await Promise.all(workers);
    }
    console.log(
      `owner from a known address: ${JSON.stringify(good)}; another member from an address not seen before: ${JSON.stringify(unseen.map((a) => a.status))}; ` +
        `flood: ${bad.filter((s) => s === 401).length} x 401, ${bad.filter((s) => s === 429).length} x 429`,
    );
    // Never refused, for capacity or by a lock. On a machine loaded far past its cores a login may
    // still outlast the gateway's deadline (504) with the rest of the process; most get in.
    expect(good.filter((s) => s !== 200 && s !== 504)).toEqual([]);
    expect(good.filter((s) => s === 200).length).toBeGreaterThanOrEqual(6);
    expect(bad.filter((s) => s !== 401 && s !== 429 && s !== 504)).toEqual([]);
    // Never locked: a refusal for capacity (or an answer the overloaded machine could not give in
    // time) was not counted as a failure, and the right password gets in once the flood is over.
    expect(unseen.filter(failedLogins).map((a) => a.body)).toEqual([]);
    const after = await login("unseen@acme.test", "the-right-one", away);
    expect(after.status, JSON.stringify(after.body)).toBe(200);
  }, 180_000);
});
