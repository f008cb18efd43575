import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callApi, OWNER } from "../support/app.js";
import { issueCredentials, postTrigger, startIntakeApp, unique, type Credentials, type IntakeApp } from "./triggers-kit.js";

/**
 * A custom source's rules (CEL) run within its organization's share of the intake process, not
 * before it: an organization whose mapping is costly spends its own share, and a delivery its
 * share refuses is never mapped. The share is held by a delivery stuck on a held row, as in
 * fair-shares.test.ts.
 */
const OWNER_ORG = OWNER.org;
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
});

describe("a custom source's mapping runs within its organization's share", () => {
  let app: IntakeApp;
  let creds: Credentials;
  let sql: postgres.Sql;

  beforeAll(async () => {
    // A total of two shares: the organization alone may borrow one more, which is its share again.
    app = await startIntakeApp("one process", { env: { INTAKE_ORG_IN_FLIGHT: "1", INTAKE_IN_FLIGHT: "2", INTAKE_SHARE_WAIT_MS: String(WAIT_MS) } });
    creds = await issueCredentials(app);
    sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
  }, 180_000);

  afterAll(async () => {
    await sql?.end();
    await app?.stop();
  });

  it("never maps a delivery its share refuses, and maps the next one once the share has room", async () => {
    const run = unique("mapping");
    const created = await app.call("POST", `/o/${OWNER_ORG}/custom-sources`, {
      token: creds.owner,
      body: { name: run.toLowerCase(), rules: [{ name: "main", title: "body.title" }] },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const source = { id: created.body.source.id as string, secret: created.body.credential.secret as string };
    const deliverCustom = (title: string) =>
      callApi(app.url, "POST", `/triggers/custom/${source.id}`, { body: { title }, headers: { authorization: `Bearer ${source.secret}` } });
    const log = async () => (await app.call("GET", `/o/${OWNER_ORG}/custom-sources/${source.id}/deliveries`, { token: creds.owner })).body.deliveries as any[];

    // The organization's one share is held by a delivery stuck on a held row.
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
      const stuck = postTrigger(app, creds.ingestToken, alertBody(`${run}-a`, `${run}-e0`), { headers: { "idempotency-key": key } });
      const lockedBy = async () =>
        (
          await sql<
            { n: number }[]
          >`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%intake.retry_keys%'`
        )[0]?.n ?? 0;
      for (const until = Date.now() + 60_000; (await lockedBy()) < 1 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 25));
      expect(await lockedBy(), "the share's delivery is stuck on the held row").toBe(1);

      const refused = await deliverCustom(`${run} refused`);
      expect(refused.status, JSON.stringify(refused.body)).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      releaseHold();
      await hold;
      expect((await stuck).body.incidentId).toBe(first.body.incidentId);
    } finally {
      releaseHold();
      await hold.catch(() => undefined);
    }
    const [refusedEntry] = await log();
    // Logged as not delivered, and its rules never ran: no rule matched because none was evaluated.
    expect(refusedEntry.outcome).toBe("failed");
    expect(refusedEntry.error).toContain("share");
    expect(refusedEntry.rule ?? null).toBeNull();

    const delivered = await deliverCustom(`${run} delivered`);
    expect(delivered.status, JSON.stringify(delivered.body)).toBe(201);
    const [deliveredEntry] = await log();
    expect(deliveredEntry.outcome).toBe("opened");
    expect(deliveredEntry.rule).toBe("main");
  }, 120_000);
});
