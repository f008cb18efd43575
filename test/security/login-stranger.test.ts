import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOGIN_THROTTLE } from "../../services/identity/login-throttle.js";
import { callApi, OWNER, startApp, type TestApp } from "../support/app.js";
import { startPrivateNats } from "../support/nats-server.js";

/**
 * Nobody is locked out of login by a stranger, and the login limits are exact: each attempt
 * reserves its failure before the password is hashed, on any replica.
 */
/**
 * Checks 40 concurrent wrong logins against the limit: exactly the free failures are answered 401
 * while the lock they start holds; one more only once a lock has run out (the documented backoff:
 * a slow machine may take longer than the 1 s lock to answer them all). An attempt the hashing queue
 * refused (429, "password checks") had reserved its failure: it counts against the limit too.
 */
function expectExactLimit(answers: { status: number; body: any; at: number }[], free: number): void {
  expect(
    answers.filter((a) => a.status !== 401 && a.status !== 429),
    JSON.stringify(answers.map((a) => a.body)),
  ).toEqual([]);
  const reserved = (a: { status: number; body: any }) => a.status === 401 || (a.status === 429 && /password checks/.test(a.body?.error ?? ""));
  const failures = answers
    .filter(reserved)
    .map((a) => a.at)
    .sort((x, y) => x - y);
  expect(failures.length).toBeGreaterThanOrEqual(free);
  // Past the free ones, each further failure came after the lock before it (1 s, 2 s, ...) had run out.
  for (let k = free; k < failures.length; k++) expect(failures[k]! - failures[k - 1]!).toBeGreaterThanOrEqual(1000 * 2 ** (k - free));
  expect(answers.filter((a) => a.status === 429 && /failed logins/.test(a.body?.error ?? "")).length).toBe(answers.length - failures.length);
}

describe("login a stranger cannot deny", () => {
  let app: TestApp;
  let owner: string;

  beforeAll(async () => {
    app = await startApp({ env: { TRUSTED_PROXY_CIDRS: "127.0.0.1/32" } });
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

  it("accepts the right password from an address that has not failed, after another address's failures", async () => {
    for (let i = 0; i < 9; i++) await login("victim@acme.test", `guess-${i}`, "192.0.2.77");
    expect((await login("victim@acme.test", "the-right-one", "192.0.2.77")).status).toBe(429);
    const real = await login("victim@acme.test", "the-right-one", "192.0.2.78");
    expect(real.status, JSON.stringify(real.body)).toBe(200);
  });

  it("lets exactly the limit of 40 concurrent wrong logins for one account through, the rest 429", async () => {
    const answers = await Promise.all(
      Array.from({ length: 40 }, async (_, i) => ({ ...(await login("exact@acme.test", `wrong-${i}`, "192.0.2.90")), at: Date.now() })),
    );
    expectExactLimit(answers, LOGIN_THROTTLE.pairFreeFailures);
  }, 120_000);

  it("keeps logins from another address working during a flood of bad logins from one (24 workers), and throttles every bad one", async () => {
    const attacker = "198.51.100.23";
    const until = Date.now() + 12_000;
    const bad: number[] = [];
    const workers = Array.from({ length: 24 }, async (_, w) => {
      for (let i = 0; Date.now() < until; i++) bad.push((await login(`nobody-${w}-${i}@acme.test`, "guess", attacker)).status);
    });
    const good: number[] = [];
    await new Promise((r) => setTimeout(r, 1500));
    for (let i = 0; i < 4; i++) {
      good.push((await login("flooded@acme.test", "the-right-one", "198.51.100.24")).status);
      await new Promise((r) => setTimeout(r, 2000));
    }
    await Promise.all(workers);
    console.log(`good logins ${JSON.stringify(good)}; bad: ${bad.filter((s) => s === 401).length} x 401, ${bad.filter((s) => s === 429).length} x 429`);
    expect(good.filter((s) => s === 200).length).toBeGreaterThanOrEqual(3);
    // Each bad login was checked against the address's limit: past its free failures, only one more
    // per lock that ran out (1 s, 2 s, 4 s, 8 s in 12 s).
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
    a = await startApp({ nats: nats.url, env: { TRUSTED_PROXY_CIDRS: "127.0.0.1/32" } });
    b = await startApp({ nats: nats.url, databaseUrl: a.databaseUrl, env: { TRUSTED_PROXY_CIDRS: "127.0.0.1/32" } });
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
      Array.from({ length: 40 }, async (_, i) => ({
        ...(await callApi(i % 2 ? a.url : b.url, "POST", "/auth/login", {
          body: { email: "replicas@acme.test", password: `wrong-${i}`, orgSlug: OWNER.org },
          headers: { "x-forwarded-for": "192.0.2.91" },
        })),
        at: Date.now(),
      })),
    );
    expectExactLimit(answers, LOGIN_THROTTLE.pairFreeFailures);
  }, 120_000);
});
