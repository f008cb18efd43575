import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callApi } from "../support/app.js";
import {
  fixture,
  getIncident,
  issueCredentials,
  listIncidents,
  startIntakeApp,
  unique,
  type Answer,
  type Credentials,
  type IntakeApp,
} from "./triggers-kit.js";

/**
 * What a sender that names its delivery with an `Idempotency-Key` gets back when something goes
 * wrong: a key reused with another body is refused (422) rather than swallowing the second alert,
 * and a delivery that answered 504 while its record was stalled, but was recorded once the stall
 * ended, is recognized when retried with the same key: the original answer, nothing recorded twice.
 */

let app: IntakeApp;
let creds: Credentials;
let sql: postgres.Sql;

beforeAll(async () => {
  app = await startIntakeApp("one process");
  creds = await issueCredentials(app);
  sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
}, 120_000);

afterAll(async () => {
  await sql?.end({ timeout: 2 });
  await app?.stop();
});

function firing(groupKey: string): unknown {
  const body = fixture("alertmanager/webhook-v4-firing.json");
  body.groupKey = groupKey;
  body.alerts = body.alerts.map((a: object) => ({ ...a, fingerprint: unique("fp") }));
  return body;
}

const sendAlertRouter = (body: unknown, idempotencyKey?: string): Promise<Answer> =>
  callApi(app.url, "POST", "/triggers/alertrouter", {
    headers: {
      "content-type": "application/json",
      "x-service-alertrouter-secret": creds.alertRouterSecret,
      ...(idempotencyKey ? { "idempotency-key": idempotencyKey } : {}),
    },
    raw: JSON.stringify(body),
  });

async function timelineKinds(incidentId: string): Promise<string[]> {
  const incident = await getIncident(app, creds.owner, incidentId);
  return incident.timeline.map((e: { kind: string }) => e.kind);
}

/**
 * Runs `stalled` while a test connection holds `lock` in an open transaction, releases it once
 * `stalled` has answered, and returns that answer.
 */
async function whileLocked(lock: (tx: postgres.TransactionSql) => Promise<unknown>, stalled: () => Promise<Answer>): Promise<Answer> {
  let answer: Answer | undefined;
  await sql.begin(async (tx) => {
    await lock(tx);
    answer = await stalled();
  });
  return answer!;
}

describe("an Idempotency-Key reused with another body", () => {
  it("answers 422 naming the key, records nothing, and the first body still gets its answer", async () => {
    const key = unique("reused-key");
    const firstBody = firing(`{}:{alertname="${unique("First")}"}`);
    const first = await sendAlertRouter(firstBody, key);
    expect(first.status, JSON.stringify(first.body)).toBe(202);
    const before = (await listIncidents(app, creds.owner)).length;

    const other = await sendAlertRouter(firing(`{}:{alertname="${unique("Other")}"}`), key);
    expect(other.status, JSON.stringify(other.body)).toBe(422);
    expect(other.body.error).toContain(key);
    expect(other.body.error).toContain("Idempotency-Key");
    expect((await listIncidents(app, creds.owner)).length).toBe(before);
    expect(await timelineKinds(first.body.incidentId)).toEqual(["opened"]);

    // The first body again with its key is a retry: the first answer, word for word.
    const retry = await sendAlertRouter(firstBody, key);
    expect(retry.status).toBe(202);
    expect(retry.body).toEqual(first.body);
  });
});

describe("a delivery that answered 504 while its record was stalled", () => {
  it("answers 504 with Retry-After; its retry with the same key gets the original answer and records no second repeat", async () => {
    const groupKey = `{}:{alertname="${unique("Stalled")}"}`;
    const opened = await sendAlertRouter(firing(groupKey));
    expect(opened.status).toBe(202);
    const incidentId = opened.body.incidentId as string;

    // The repeat waits on the incident's row, locked by the test, past the call's deadline.
    const key = unique("stalled-repeat");
    const repeatBody = firing(groupKey);
    const stalled = await whileLocked(
      (tx) => tx`select id from incidents.incidents where id = ${incidentId} for update`,
      () => sendAlertRouter(repeatBody, key),
    );
    expect(stalled.status, JSON.stringify(stalled.body)).toBe(504);
    expect(Number(stalled.headers.get("retry-after"))).toBeGreaterThan(0);

    // Once the lock is gone the stalled statement commits: the repeat was recorded after all.
    await expect.poll(() => timelineKinds(incidentId)).toEqual(["opened", "repeat"]);

    const retry = await sendAlertRouter(repeatBody, key);
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body).toMatchObject({ outcome: "attached", incidentId });
    expect(await timelineKinds(incidentId)).toEqual(["opened", "repeat"]);
  });

  it("a stalled first delivery that opened an incident: its retry answers opened, with that one incident", async () => {
    const groupKey = `{}:{alertname="${unique("StalledOpen")}"}`;
    const key = unique("stalled-open");
    const body = firing(groupKey);
    const before = await listIncidents(app, creds.owner);
    const stalled = await whileLocked(
      (tx) => tx`lock table incidents.incidents in exclusive mode`,
      () => sendAlertRouter(body, key),
    );
    expect(stalled.status, JSON.stringify(stalled.body)).toBe(504);
    expect(Number(stalled.headers.get("retry-after"))).toBeGreaterThan(0);
    await expect.poll(async () => (await listIncidents(app, creds.owner)).length).toBe(before.length + 1);

    const retry = await sendAlertRouter(body, key);
    expect(retry.status, JSON.stringify(retry.body)).toBe(202);
    expect(retry.body.outcome).toBe("opened");
    const after = await listIncidents(app, creds.owner);
    expect(after.length).toBe(before.length + 1);
    expect(after.map((i: { id: string }) => i.id)).toContain(retry.body.incidentId);
    expect(await timelineKinds(retry.body.incidentId)).toEqual(["opened"]);
  });
});
