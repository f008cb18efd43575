import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RECEIVER_FAILURES_PER_MINUTE } from "../../services/intake/receiver-secrets.js";
import { startApp, type TestApp } from "../support/app.js";
import { startPrivateNats } from "../support/nats-server.js";

/**
 * Outsiders without the secret cannot spend a receiver's budget, grow the audit log one row per
 * call, or choose the client address the records name.
 */

/** Waits until the database clock is early in a minute, so a burst stays in one window. */
async function earlyInTheMinute(db: postgres.Sql, latestSecond = 35): Promise<void> {
  for (;;) {
    const [row] = await db<{ second: number }[]>`select extract(second from clock_timestamp())::float8 as second`;
    if (row!.second < latestSecond) return;
    await new Promise((r) => setTimeout(r, (60.5 - row!.second) * 1000));
  }
}

const ATTACKER = "203.0.113.7";
const WORKFLOW = "198.51.100.2";

describe("receivers behind a trusted proxy", () => {
  let app: TestApp;
  let db: postgres.Sql;
  let chatSecret: string;
  let alertRouterSecret: string;

  beforeAll(async () => {
    // The test's requests come from 127.0.0.1, which plays the load balancer naming each client.
    app = await startApp({ env: { TRUSTED_PROXY_CIDRS: "127.0.0.1/32,10.0.0.0/8" } });
    db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    const owner = await app.ownerToken();
    chatSecret = (await app.call("POST", "/o/acme/triggers/chat-secret", { token: owner, body: {} })).body.secret;
    alertRouterSecret = (await app.call("POST", "/o/acme/triggers/alertrouter-secret", { token: owner, body: {} })).body.secret;
  });
  afterAll(async () => {
    await db?.end();
    await app?.stop();
  });

  const chat = (from: string, secret: string, text: string) =>
    app.call("POST", "/triggers/chat/acme", {
      raw: JSON.stringify({ channel_id: "C-abuse", message_id: `m-${text}`, text }),
      headers: { "content-type": "application/json", "x-service-chat-secret": secret, "x-forwarded-for": from },
    });

  it("61 calls without the secret do not lock the real workflow out; the guesser is slowed", async () => {
    await earlyInTheMinute(db);
    const statuses: number[] = [];
    for (let i = 0; i < 61; i++) statuses.push((await chat(ATTACKER, "f".repeat(64), `guess-${i}`)).status);
    expect(statuses.slice(0, RECEIVER_FAILURES_PER_MINUTE)).toEqual(Array(RECEIVER_FAILURES_PER_MINUTE).fill(401));
    expect(statuses.slice(RECEIVER_FAILURES_PER_MINUTE)).toEqual(Array(61 - RECEIVER_FAILURES_PER_MINUTE).fill(429));
    const blocked = await chat(ATTACKER, "f".repeat(64), "one-more");
    expect(Number(blocked.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);

    const real = await chat(WORKFLOW, chatSecret, "real-alert");
    expect(real.status).toBe(201);
    expect(real.body.outcome).toBe("opened");

    // Every failure is audited, coalesced: one row for this organization, reason and address in
    // this minute, with the count (the secret is checked on every call, the limit only answers 429).
    const rows = await db<{ data: { reason: string; remoteAddress: string; count: number } }[]>`
      select data from identity.audit_events where kind = 'receiver.auth_failed' and data->>'remoteAddress' = ${ATTACKER}`;
    expect(rows).toHaveLength(1);
    expect(rows[0]!.data).toMatchObject({ reason: "secret wrong", remoteAddress: ATTACKER, count: 62 });
  });

  it("the right chat secret gets through from an address past its failure limit (a shared vendor range)", async () => {
    await earlyInTheMinute(db);
    const shared = "203.0.113.40";
    const statuses: number[] = [];
    for (let i = 0; i < 65; i++) statuses.push((await chat(shared, "c".repeat(64), `shared-guess-${i}`)).status);
    expect(statuses.slice(RECEIVER_FAILURES_PER_MINUTE)).toEqual(Array(65 - RECEIVER_FAILURES_PER_MINUTE).fill(429));
    const real = await chat(shared, chatSecret, "real-from-shared-range");
    expect(real.status, JSON.stringify(real.body)).toBe(201);
  });

  const alertRouter = (from: string, secret: string) =>
    app.call("POST", "/triggers/alertrouter", {
      raw: JSON.stringify({ version: "4", status: "firing", receiver: "warroom", groupKey: "g", alerts: [] }),
      headers: { "content-type": "application/json", "x-service-alertrouter-secret": secret, "x-forwarded-for": from },
    });

  it("the right alert-router secret gets through from an address past its failure limit", async () => {
    await earlyInTheMinute(db);
    const shared = "203.0.113.41";
    for (let i = 0; i < 15; i++) await alertRouter(shared, "b".repeat(64));
    expect((await alertRouter(shared, "b".repeat(64))).status).toBe(429);
    const real = await alertRouter(shared, alertRouterSecret);
    expect([401, 429]).not.toContain(real.status);
  });

  it("200 bad alert-router posts, 40 at a time, get exactly the limit of 401s", async () => {
    await earlyInTheMinute(db, 30);
    const statuses: number[] = [];
    for (let round = 0; round < 5; round++) {
      statuses.push(...(await Promise.all(Array.from({ length: 40 }, () => alertRouter("203.0.113.42", "a".repeat(64))))).map((r) => r.status));
    }
    expect(statuses.filter((st) => st !== 401 && st !== 429)).toEqual([]);
    expect(statuses.filter((st) => st === 401).length).toBe(RECEIVER_FAILURES_PER_MINUTE);
  }, 120_000);

  it("the alert-router receiver limits failed attempts per address too", async () => {
    await earlyInTheMinute(db);
    const post = (from: string, secret: string) =>
      app.call("POST", "/triggers/alertrouter", {
        raw: JSON.stringify({ version: "4", status: "firing", receiver: "warroom", groupKey: "g", alerts: [] }),
        headers: { "content-type": "application/json", "x-service-alertrouter-secret": secret, "x-forwarded-for": from },
      });
    const statuses: number[] = [];
    for (let i = 0; i <= RECEIVER_FAILURES_PER_MINUTE; i++) statuses.push((await post("192.0.2.99", "e".repeat(64))).status);
    expect(statuses).toEqual([...Array(RECEIVER_FAILURES_PER_MINUTE).fill(401), 429]);
    expect((await post("192.0.2.100", alertRouterSecret)).status).not.toBe(401);
  });

  describe("custom-source routes", () => {
    let source: { id: string; secret: string };
    const rules = [{ name: "every", when: "true", title: "body.name" }];
    const custom = (from: string, path: string, headers: Record<string, string>, name: string) =>
      app.call("POST", path, { raw: JSON.stringify({ name }), headers: { "content-type": "application/json", "x-forwarded-for": from, ...headers } });

    beforeAll(async () => {
      const owner = await app.ownerToken();
      const res = await app.call("POST", "/o/acme/custom-sources", {
        token: owner,
        body: { name: "abuse-scripts", rules, auth: { secretInPath: true, basicAuth: true } },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      source = { id: res.body.source.id, secret: res.body.credential.secret };
    });

    it("limits failed credentials per address with one identical rejection; the right credential still gets through", async () => {
      await earlyInTheMinute(db);
      const guesser = "203.0.113.50";
      const unknownSource = "00000000-0000-4000-8000-000000000000";
      // Wrong Bearer, unknown source, wrong path secret, wrong Basic password: all one budget, one answer.
      const attempts = [
        () => custom(guesser, `/triggers/custom/${source.id}`, { authorization: `Bearer ${"f".repeat(64)}` }, "guess"),
        () => custom(guesser, `/triggers/custom/${unknownSource}`, { authorization: `Bearer ${source.secret}` }, "guess"),
        () => custom(guesser, `/triggers/custom/${source.id}/${"e".repeat(64)}`, {}, "guess"),
        () => custom(guesser, `/triggers/custom/${source.id}`, { authorization: `Basic ${Buffer.from(`x:${"d".repeat(64)}`).toString("base64")}` }, "guess"),
      ];
      const answers = [];
      for (let i = 0; i <= RECEIVER_FAILURES_PER_MINUTE; i++) answers.push(await attempts[i % attempts.length]!());
      expect(answers.map((a) => a.status)).toEqual([...Array(RECEIVER_FAILURES_PER_MINUTE).fill(401), 429]);
      const refusals = new Set(answers.slice(0, RECEIVER_FAILURES_PER_MINUTE).map((a) => JSON.stringify(a.body)));
      expect(refusals.size).toBe(1);
      const blocked = answers.at(-1)!;
      expect(Number(blocked.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(blocked.body.error).toMatch(/try again later/);

      // The sender's own credential is checked first: from another address, and from the throttled one.
      const real = await custom("198.51.100.50", `/triggers/custom/${source.id}`, { authorization: `Bearer ${source.secret}` }, "Backup failed");
      expect(real.status, JSON.stringify(real.body)).toBe(201);
      expect(real.body.outcome).toBe("opened");
      const shared = await custom(guesser, `/triggers/custom/${source.id}/${source.secret}`, {}, "Backup failed");
      expect(shared.status, JSON.stringify(shared.body)).not.toBe(429);
      expect(shared.status).not.toBe(401);
    });

    it("counts failures over Connect against the same budget as REST", async () => {
      await earlyInTheMinute(db);
      const guesser = "203.0.113.51";
      const connect = (secret: string) =>
        app.call("POST", "/warroom.intake.v1.IntakeService/DeliverCustomSource", {
          body: { sourceId: source.id, body: Buffer.from('{"name":"x"}').toString("base64"), contentType: "application/json" },
          headers: { "connect-protocol-version": "1", authorization: `Bearer ${secret}`, "x-forwarded-for": guesser },
        });
      for (let i = 0; i < RECEIVER_FAILURES_PER_MINUTE; i++) expect((await connect("a".repeat(64))).status).toBe(401);
      const rest = await custom(guesser, `/triggers/custom/${source.id}`, { authorization: `Bearer ${"a".repeat(64)}` }, "guess");
      expect(rest.status).toBe(429);
      expect(Number(rest.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    });
  });

  it("the client is the right-most address a trusted proxy did not add", async () => {
    await chat(`1.2.3.4, 192.0.2.77, 10.1.2.3`, "d".repeat(64), "chain");
    const [row] = await db<{ data: { remoteAddress: string } }[]>`
      select data from identity.audit_events where kind = 'receiver.auth_failed' order by id desc limit 1`;
    expect(row!.data.remoteAddress).toBe("192.0.2.77");
  });
});

describe("receivers without a trusted proxy", () => {
  let app: TestApp;
  let db: postgres.Sql;

  beforeAll(async () => {
    app = await startApp();
    db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await db?.end();
    await app?.stop();
  });

  it("a forged X-Forwarded-For is not written into the audit log, over REST or Connect", async () => {
    await app.call("POST", "/triggers/chat/acme", {
      raw: JSON.stringify({ channel_id: "C", text: "x" }),
      headers: { "content-type": "application/json", "x-service-chat-secret": "0".repeat(64), "x-forwarded-for": "6.6.6.6" },
    });
    await app.call("POST", "/warroom.intake.v1.IntakeService/DeliverChat", {
      body: { orgSlug: "acme", body: Buffer.from('{"channel_id":"C","text":"x"}').toString("base64"), contentType: "application/json" },
      headers: { "connect-protocol-version": "1", "x-service-chat-secret": "1".repeat(64), "x-forwarded-for": "6.6.6.6" },
    });
    const rows = await db<{ data: { remoteAddress: string } }[]>`select data from identity.audit_events where kind = 'receiver.auth_failed'`;
    expect(rows.length).toBeGreaterThanOrEqual(1);
    for (const row of rows) expect(row.data.remoteAddress).toBe("127.0.0.1");
  });
});

describe("receiver failure limits over NATS with two gateway replicas", () => {
  let a: TestApp;
  let b: TestApp;
  let db: postgres.Sql;
  let nats: Awaited<ReturnType<typeof startPrivateNats>>;

  beforeAll(async () => {
    nats = await startPrivateNats();
    const env = { TRUSTED_PROXY_CIDRS: "127.0.0.1/32" };
    a = await startApp({ nats: nats.url, env });
    b = await startApp({ nats: nats.url, databaseUrl: a.databaseUrl, env });
    db = postgres(a.databaseUrl, { max: 1, onnotice: () => {} });
  }, 120_000);
  afterAll(async () => {
    await db?.end();
    await b?.stop();
    await a?.stop();
    await nats?.cleanup();
  });

  it("200 bad alert-router posts, 40 at a time over both replicas, get exactly the limit of 401s", async () => {
    await earlyInTheMinute(db, 30);
    const statuses: number[] = [];
    for (let round = 0; round < 5; round++) {
      const answers = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          (i % 2 ? a : b).call("POST", "/triggers/alertrouter", {
            raw: JSON.stringify({ version: "4", status: "firing", receiver: "warroom", groupKey: "g", alerts: [] }),
            headers: { "content-type": "application/json", "x-service-alertrouter-secret": "9".repeat(64), "x-forwarded-for": "203.0.113.43" },
          }),
        ),
      );
      statuses.push(...answers.map((r) => r.status));
    }
    expect(statuses.filter((st) => st !== 401 && st !== 429)).toEqual([]);
    expect(statuses.filter((st) => st === 401).length).toBe(RECEIVER_FAILURES_PER_MINUTE);
  }, 120_000);
});
