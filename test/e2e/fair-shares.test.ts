import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callApi, OWNER } from "../support/app.js";

const OWNER_ORG = OWNER.org;
import {
  bootstrapOrg,
  issueCredentials,
  listIncidents,
  MODES,
  postTrigger,
  startIntakeApp,
  unique,
  type Answer,
  type Credentials,
  type IntakeApp,
} from "./triggers-kit.js";

/**
 * Fair shares: an organization whose deliveries are all stuck (its rows held by another
 * transaction, as a slow incident core or a lock would hold them) keeps at most
 * INTAKE_ORG_IN_FLIGHT in flight in the intake process; its next ones wait their turn up to
 * INTAKE_SHARE_WAIT_MS and are then refused with Retry-After, in the status its senders retry. A
 * second organization is answered meanwhile, while the first one's deliveries are still stuck.
 * When the hold ends, every delivery that was taken is recorded once.
 */
const SHARE = 2;
const WAIT_MS = 300;

const alertBody = (alertId: string, eventId: string) => ({
  title: `[Triggered on {host:web-1}] ${alertId}`,
  body: "CPU above 90% for 5 minutes",
  alert_id: alertId,
  alert_transition: "Triggered",
  alert_type: "error",
  alert_priority: "P2",
  event_id: eventId,
  tags: ["env:prod"],
  link: "https://monitor.example.com/event/jump_to?event_id=1",
});

const pagerDutyEvent = (routingKey: string, dedupKey: string) => ({
  routing_key: routingKey,
  event_action: "trigger",
  dedup_key: dedupKey,
  payload: { summary: `disk full ${dedupKey}`, source: "db-1", severity: "critical" },
});

describe.each(MODES)("fair shares of intake (%s)", (mode) => {
  let app: IntakeApp;
  let flooding: Credentials;
  let quiet: Credentials;
  let sql: postgres.Sql;

  beforeAll(async () => {
    app = await startIntakeApp(mode, {
      intakes: 1,
      // A total of two shares: an organization alone may borrow up to the total less one share,
      // which is then its share, so the flooding organization is held to it from the start.
      env: { INTAKE_ORG_IN_FLIGHT: String(SHARE), INTAKE_IN_FLIGHT: String(2 * SHARE), INTAKE_SHARE_WAIT_MS: String(WAIT_MS) },
    });
    flooding = await issueCredentials(app);
    quiet = await bootstrapOrg(app, unique("quiet").slice(0, 30));
    sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
  }, 180_000);

  afterAll(async () => {
    await sql?.end();
    await app?.stop();
  });

  it("holds one organization to its share, refuses the rest in time with Retry-After, and never slows another", async () => {
    const run = unique("share");
    const key = `${run}-key`;
    // The stuck deliveries are retries of one Idempotency-Key; its row exists once answered.
    const first = await postTrigger(app, flooding.ingestToken, alertBody(`${run}-a`, `${run}-e0`), { headers: { "idempotency-key": key } });
    expect(first.status).toBe(201);
    const pdKey = `${run}-pd`;
    const pdFirst = await callApi(app.url, "POST", "/v2/enqueue", { body: pagerDutyEvent(flooding.ingestToken, pdKey), headers: { "idempotency-key": pdKey } });
    expect(pdFirst.status).toBe(202);
    const [keyRow] = await sql<{ org_id: string }[]>`select org_id from intake.retry_keys order by created_at desc limit 1`;
    const orgId = keyRow!.org_id;
    // The second organization's first delivery, before the hold: its token is then known to intake,
    // and what the test times below is its deliveries, not a first lookup on a busy machine.
    expect((await postTrigger(app, quiet.ingestToken, alertBody(`${run}-q`, `${run}-q-e0`))).status).toBe(201);

    let releaseHold!: () => void;
    const holdReleased = new Promise<void>((resolve) => (releaseHold = resolve));
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const hold = sql.begin(async (tx) => {
      await tx`select 1 from intake.retry_keys where org_id = ${orgId} for update`;
      holding();
      await holdReleased;
    });
    await held;
    try {
      // SHARE of these take the organization's share and stay stuck on the held rows.
      const stuck: Promise<Answer>[] = [];
      let settled = 0;
      for (let i = 0; i < SHARE; i++) {
        const answer = postTrigger(app, flooding.ingestToken, alertBody(`${run}-a`, `${run}-e0`), { headers: { "idempotency-key": key } });
        stuck.push(answer.finally(() => settled++));
      }
      // Wait until both are in flight: the next one then finds the share full. (The bound only
      // ends a hang: a busy machine takes its time reaching the lock, never this long.)
      const lockedBy = async () =>
        (
          await sql<
            { n: number }[]
          >`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%intake.retry_keys%'`
        )[0]?.n ?? 0;
      for (const until = Date.now() + 60_000; (await lockedBy()) < SHARE && Date.now() < until; ) await new Promise((r) => setTimeout(r, 25));
      expect(await lockedBy(), "the share's deliveries are stuck on the held rows").toBe(SHARE);
      // Beyond the share: waits in its own queue, then refused, each in the status its sender retries.
      const [overShared, overPagerDuty] = await Promise.all([
        postTrigger(app, flooding.ingestToken, alertBody(`${run}-b`, `${run}-b0`)),
        callApi(app.url, "POST", "/v2/enqueue", { body: pagerDutyEvent(flooding.ingestToken, `${run}-pd2`) }),
      ]);
      expect(overShared.status, JSON.stringify(overShared.body)).toBe(503);
      expect(Number(overShared.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(JSON.stringify(overShared.body)).toContain("share");
      expect(overPagerDuty.status, JSON.stringify(overPagerDuty.body)).toBe(429);
      expect(Number(overPagerDuty.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);

      // Another organization is answered while the first one's deliveries are still stuck: its
      // share at once, twice (more at once would wait in its own queue, which is not the point).
      const other: Answer[] = [];
      for (let round = 0; round < 2; round++) {
        other.push(
          ...(await Promise.all(
            Array.from({ length: SHARE }, (_, k) => {
              const i = round * SHARE + k;
              return postTrigger(app, quiet.ingestToken, alertBody(`${run}-q${i}`, `${run}-q${i}-e0`), { headers: { "idempotency-key": `${run}-q${i}` } });
            }),
          )),
        );
      }
      expect(other.map((a) => a.status)).toEqual(Array(2 * SHARE).fill(201));
      expect(settled).toBe(0);

      releaseHold();
      await hold;
      const answers = await Promise.all(stuck);
      // The retries get the first delivery's answer: the same incident, recorded once.
      expect(answers.map((a) => a.body.incidentId)).toEqual(Array(SHARE).fill(first.body.incidentId));
    } finally {
      releaseHold();
      await hold.catch(() => undefined);
    }
    const incidents = await listIncidents(app, flooding.owner);
    expect(incidents.filter((i: any) => i.title.includes(`${run}-a`))).toHaveLength(1);
    // The refused delivery opened nothing.
    expect(incidents.filter((i: any) => i.title.includes(`${run}-b`))).toHaveLength(0);
  }, 120_000);
});

describe("overload: a process refuses deliveries past its total at once (one process)", () => {
  let app: IntakeApp;
  let creds: Credentials;
  let sql: postgres.Sql;

  beforeAll(async () => {
    // Two deliveries in flight over every organization, none waiting: the third is refused at once.
    app = await startIntakeApp("one process", { env: { INTAKE_IN_FLIGHT: "2", INTAKE_MAX_WAITING: "0", INTAKE_ORG_IN_FLIGHT: "100" } });
    creds = await issueCredentials(app);
    sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
  }, 180_000);

  afterAll(async () => {
    await sql?.end();
    await app?.stop();
  });

  it("answers 503 or 429 with Retry-After while its cap is full, in the status each sender retries, and takes deliveries again after", async () => {
    const run = unique("cap");
    const key = `${run}-key`;
    const first = await postTrigger(app, creds.ingestToken, alertBody(`${run}-a`, `${run}-e0`), { headers: { "idempotency-key": key } });
    expect(first.status).toBe(201);
    const [keyRow] = await sql<{ org_id: string }[]>`select org_id from intake.retry_keys order by created_at desc limit 1`;
    let releaseHold!: () => void;
    const holdReleased = new Promise<void>((resolve) => (releaseHold = resolve));
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const hold = sql.begin(async (tx) => {
      await tx`select 1 from intake.retry_keys where org_id = ${keyRow!.org_id} for update`;
      holding();
      await holdReleased;
    });
    await held;
    try {
      const stuck = [0, 1].map(() => postTrigger(app, creds.ingestToken, alertBody(`${run}-a`, `${run}-e0`), { headers: { "idempotency-key": key } }));
      for (let i = 0; i < 200; i++) {
        const [waiting] = await sql<
          { n: number }[]
        >`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%intake.retry_keys%'`;
        if ((waiting?.n ?? 0) >= 2) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      const [shared, pagerDuty] = await Promise.all([
        postTrigger(app, creds.ingestToken, alertBody(`${run}-b`, `${run}-b0`)),
        callApi(app.url, "POST", "/v2/enqueue", { body: pagerDutyEvent(creds.ingestToken, `${run}-pd`) }),
      ]);
      expect(shared.status, JSON.stringify(shared.body)).toBe(503);
      expect(Number(shared.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(JSON.stringify(shared.body)).toContain("Retry-After");
      expect(pagerDuty.status, JSON.stringify(pagerDuty.body)).toBe(429);
      expect(Number(pagerDuty.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      // Other routes are not deliveries and are not held back.
      expect((await app.call("GET", `/o/${OWNER_ORG}/incidents?limit=1`, { token: creds.owner })).status).toBe(200);
      releaseHold();
      await hold;
      expect((await Promise.all(stuck)).map((a) => a.body.incidentId)).toEqual([first.body.incidentId, first.body.incidentId]);
    } finally {
      releaseHold();
      await hold.catch(() => undefined);
    }
    const after = await postTrigger(app, creds.ingestToken, alertBody(`${run}-c`, `${run}-c0`));
    expect(after.status).toBe(201);
    const incidents = await listIncidents(app, creds.owner);
    expect(incidents.filter((i: any) => i.title.includes(`${run}-b`))).toHaveLength(0);
  }, 120_000);
});
