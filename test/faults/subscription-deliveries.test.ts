import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestCertificates } from "../support/https-receiver.js";
import type { Clients } from "../../services/runtime/transport/clients.js";
import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { startSubscriptionsHarness, type SubscriptionsHarness } from "../../services/subscriptions/testing/harness.js";
import type { Behaviour, WebhookReceiver } from "../../services/subscriptions/testing/webhook-receiver.js";
import { callApi, freshDatabase, OWNER, type TestApp } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";
import { startServiceProcess, type ServiceProcess } from "../support/service-process.js";
import { makeDeliveries, ownerAndIngestToken, runLoad } from "./load.js";

/**
 * Event subscriptions under faults, over NATS (JetStream durable consumers feed the deliveries):
 * a receiver down and back, failing every other time, hanging past the timeout, NATS restarted
 * mid-delivery, and a subscription deleted with retries pending. Each case counts the incidents
 * opened (sent), the ones whose event the receiver took (delivered), those it took more than once
 * (doubled: allowed, always with one webhook-id) and those it never took (lost: must be 0). The
 * retry schedule is shortened by configuration; its shape is the production one. Last, in one
 * process and over NATS alike, the service is killed (kill -9) in the middle of a storm's
 * deliveries and started again: what it had not sent is continued from Postgres.
 */
const SCHEDULE = "0.2,0.5,1,2,3,3,3,3,3,3";
let nats: PrivateNats;
let app: TestApp;
let certs: TestCertificates;
let receiver: WebhookReceiver;
let clients: Clients;
let sql: postgres.Sql;
let orgId: string;
let owner: string;

async function until<T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`never saw ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function subscribe(name: string, behaviour: Behaviour): Promise<string> {
  receiver.endpoint(name, [], behaviour);
  const res = await app.call("POST", "/o/acme/subscriptions", { token: owner, body: { url: receiver.url(name), events: ["incident.opened"] } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  receiver.setSecrets(name, [res.body.secret]);
  return res.body.id;
}

async function openIncidents(count: number, label: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await clients.incidents.record({
      orgId,
      orgSlug: "acme",
      alert: {
        source: "metrics-monitor",
        attachIdentity: `${label}-${i}-${randomBytes(4).toString("hex")}`,
        kind: "alert",
        title: `${label} ${i}`,
        severity: "sev3",
        summary: "",
      },
    });
    ids.push(res.incident!.id);
  }
  return ids;
}

/** What the receiver took of the events of `sent`, at endpoint `name` (posts after `from` only). */
function tally(name: string, sent: string[], from = 0) {
  const accepted = receiver.deliveries.slice(from).filter((d) => d.endpoint === name && d.accepted);
  const byIncident = new Map<string, { count: number; ids: Set<string> }>();
  for (const d of accepted) {
    const incidentId = String(d.event.data.incidentId);
    const entry = byIncident.get(incidentId) ?? { count: 0, ids: new Set<string>() };
    entry.count++;
    entry.ids.add(d.webhookId);
    byIncident.set(incidentId, entry);
  }
  return {
    sent: sent.length,
    delivered: sent.filter((id) => byIncident.has(id)).length,
    doubled: sent.filter((id) => (byIncident.get(id)?.count ?? 0) > 1).length,
    // A doubled event must carry the same webhook-id each time, or a receiver cannot dedupe it.
    doubledWithAnotherId: sent.filter((id) => (byIncident.get(id)?.ids.size ?? 0) > 1).length,
    lost: sent.filter((id) => !byIncident.has(id)).length,
    unverified: receiver.deliveries.filter((d) => d.endpoint === name && !d.verified).length,
  };
}

/** The whole service as one process of its own, to be killed and started again on the same database. */
function restartableServiceEnv(databaseUrl: string, natsUrl: string): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    NATS_URL: natsUrl,
    PORT: "0",
    HOST: "127.0.0.1",
    // The process says where it serves at info.
    LOG_LEVEL: "info",
    BOOTSTRAP_ORG_SLUG: OWNER.org,
    BOOTSTRAP_OWNER_EMAIL: OWNER.email,
    BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
    SHUTDOWN_GRACE_SECONDS: "1",
    // The same key for both lives of the service: the second unseals the signing secrets the first stored.
    SECRETS_KEYS: newSecretKeyEntry("k1"),
    EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
    EGRESS_CA_FILE: certs.caFile,
  };
}

function report(what: string, result: ReturnType<typeof tally>) {
  console.log(`${what}: ${JSON.stringify(result)}`);
  expect(result.lost).toBe(0);
  expect(result.delivered).toBe(result.sent);
  expect(result.doubledWithAnotherId).toBe(0);
  expect(result.unverified).toBe(0);
}

let harness: SubscriptionsHarness;

beforeAll(async () => {
  nats = await startPrivateNats();
  harness = await startSubscriptionsHarness({
    nats: nats.url,
    env: { SUBSCRIPTION_TIMEOUT_SECONDS: "1.5", SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: SCHEDULE },
  });
  ({ app, certs, receiver, sql, clients, orgId, owner } = harness);
}, 120_000);

afterAll(async () => {
  await harness?.stop();
  await nats?.cleanup();
});

describe("subscription deliveries under faults", () => {
  it("a receiver down for a while, then back: every event arrives", async () => {
    let down = true;
    const id = await subscribe("down-then-back", () => (down ? "drop" : { status: 204 }));
    const sent = await openIncidents(20, "down");
    // It is tried while down, and each such try fails without an answer: it comes back once every
    // event has failed at least once (a hang bound, not a wait).
    const failedWithoutAnswer = async () =>
      (
        await sql<{ n: number }[]>`
          select count(*)::int as n from subscriptions.attempts a join subscriptions.deliveries d on d.id = a.delivery_id
          where d.subscription_id = ${id} and a.outcome = 'failed' and a.status = 0`
      )[0]!.n;
    await until("a failed try of every event while the receiver was down", async () => (await failedWithoutAnswer()) >= sent.length, 60_000);
    expect(receiver.deliveries.filter((d) => d.endpoint === "down-then-back")).toEqual([]);
    down = false;
    await until("every event after the receiver came back", () => tally("down-then-back", sent).delivered === sent.length, 60_000);
    report("receiver down, then back", tally("down-then-back", sent));
  }, 120_000);

  it("a receiver answering 500 every other time", async () => {
    await subscribe("every-other", (n) => (n % 2 === 0 ? { status: 500, body: "oops" } : { status: 200 }));
    const sent = await openIncidents(20, "flaky");
    await until("every event", () => tally("every-other", sent).delivered === sent.length, 60_000);
    report("500 every other time", tally("every-other", sent));
  }, 120_000);

  it("a receiver that hangs past the timeout, then answers", async () => {
    await subscribe("hangs", (n) => (n % 3 === 0 ? "hang" : { status: 202 }));
    const sent = await openIncidents(12, "hang");
    await until("every event", () => tally("hangs", sent).delivered === sent.length, 60_000);
    expect(receiver.hanging("hangs").maxOpen).toBeLessThanOrEqual(4);
    report("hang past the timeout", tally("hangs", sent));
  }, 120_000);

  it("NATS restarted mid-delivery", async () => {
    await subscribe("nats-restart", (n) => (n % 4 === 0 ? { status: 503, headers: { "retry-after": "1" } } : { status: 204 }));
    const before = await openIncidents(15, "nats-a");
    await nats.stop();
    await new Promise((r) => setTimeout(r, 3000));
    await nats.start();
    const after = await until(
      "intake over NATS again",
      async () => {
        try {
          return await openIncidents(15, "nats-b");
        } catch {
          return undefined;
        }
      },
      60_000,
    );
    const sent = [...before, ...after];
    await until("every event", () => tally("nats-restart", sent).delivered === sent.length, 90_000);
    report("NATS restarted mid-delivery", tally("nats-restart", sent));
  }, 180_000);

  it("a subscription deleted with retries pending: they stop, nothing is left behind", async () => {
    const id = await subscribe("deleted", () => ({ status: 500 }));
    const sent = await openIncidents(5, "deleted");
    await until(
      "a failed attempt of every event",
      () => new Set(receiver.deliveries.filter((d) => d.endpoint === "deleted").map((d) => d.event.data.incidentId)).size === 5,
      30_000,
    );
    expect((await app.call("DELETE", `/o/acme/subscriptions/${id}`, { token: owner })).status).toBe(204);
    const atDelete = receiver.deliveries.filter((d) => d.endpoint === "deleted").length;
    // Longer than the next three waits of the schedule: retries would have come by now.
    await new Promise((r) => setTimeout(r, 4000));
    const afterDelete = receiver.deliveries.filter((d) => d.endpoint === "deleted").length;
    // An attempt already in flight at the delete may still land; no new one starts.
    expect(afterDelete - atDelete).toBeLessThanOrEqual(4);
    const [left] = await sql<{ n: number }[]>`select count(*)::int as n from subscriptions.deliveries where subscription_id = ${id}`;
    expect(left!.n).toBe(0);
    console.log(
      `subscription deleted with retries pending: ${JSON.stringify({ sent: sent.length, postsBeforeDelete: atDelete, postsAfterDelete: afterDelete - atDelete })}`,
    );
  });
});

describe.each([
  ["in one process", false],
  ["over NATS", true],
])("the service killed mid-storm and started again (%s)", (mode, overNats) => {
  it("continues every delivery it had not sent from Postgres: none lost, doubled only with the same webhook-id", async () => {
    const INCIDENTS = 120;
    const database = await freshDatabase();
    const ownNats = overNats ? await startPrivateNats() : undefined;
    const from = receiver.deliveries.length;
    const env = {
      ...restartableServiceEnv(database.url, ownNats?.url ?? ""),
      // Long enough that a post to a receiver that answers is never cut short on a machine busy
      // with other work (a delivery cut short ten times is given up); the slow receiver's
      // hanging posts are still in flight when the process is killed.
      SUBSCRIPTION_TIMEOUT_SECONDS: "5",
      SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: SCHEDULE,
    };
    const processes: ServiceProcess[] = [];
    const db = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      const first = startServiceProcess(env);
      processes.push(first);
      const firstUrl = (await first.serving).url;
      const { owner: token, ingest } = await ownerAndIngestToken(firstUrl);
      expect((await callApi(firstUrl, "PUT", "/o/acme/oncall/egress", { token, body: { enabled: true } })).status).toBe(200);
      // Two receivers: one takes every post, one leaves every fourth hanging past the timeout while
      // the first process lives, so that the kill finds attempts in flight and deliveries waiting.
      const steady = `restart-steady-${overNats ? "nats" : "one"}`;
      const slow = `restart-slow-${overNats ? "nats" : "one"}`;
      let firstAlive = true;
      for (const [name, behaviour] of [
        [steady, () => ({ status: 204 })],
        [slow, (n: number) => (firstAlive && n % 4 === 0 ? "hang" : { status: 204 })],
      ] as const) {
        receiver.endpoint(name, [], behaviour as Behaviour);
        const res = await callApi(firstUrl, "POST", "/o/acme/subscriptions", { token, body: { url: receiver.url(name), events: ["incident.opened"] } });
        expect(res.status, JSON.stringify(res.body)).toBe(201);
        receiver.setSecrets(name, [res.body.secret]);
      }

      const storm = await runLoad({
        urls: [firstUrl],
        token: ingest,
        deliveries: makeDeliveries(randomBytes(4).toString("hex"), INCIDENTS, INCIDENTS),
        concurrency: 8,
        deadlineMs: 60_000,
      });
      expect(storm.unacknowledged).toEqual([]);
      const sent = (await db<{ id: string }[]>`select id::text from incidents.incidents`).map((r) => r.id);
      expect(sent).toHaveLength(INCIDENTS);

      // Killed once the steady receiver has a quarter of the events: the slow one has far fewer.
      await until("a quarter of the events at the steady receiver", () => tally(steady, sent, from).delivered >= INCIDENTS / 4, 120_000);
      first.child.kill("SIGKILL");
      await first.exited;
      firstAlive = false;
      const atKill = { steady: tally(steady, sent, from).delivered, slow: tally(slow, sent, from).delivered };
      const left = await db<{ state: string; n: number }[]>`select state, count(*)::int as n from subscriptions.deliveries group by state order by state`;
      const [outbox] = await db<{ n: number }[]>`select count(*)::int as n from incidents.outbox`;
      const byState = Object.fromEntries(left.map((r) => [r.state, r.n]));
      const notQueued = INCIDENTS * 2 - left.reduce((n, r) => n + r.n, 0);
      console.log(`killed mid-storm (${mode}): ${JSON.stringify({ received: atKill, deliveries: byState, notQueued, unpublishedEvents: outbox!.n })}`);
      // The kill left work behind: events the slow receiver had not had, deliveries not settled.
      expect(atKill.slow).toBeLessThan(INCIDENTS);
      expect((byState.pending ?? 0) + (byState.delivering ?? 0) + notQueued).toBeGreaterThan(0);

      // The killed process's claims come back when their lease runs out (the 5 s timeout and a
      // 30 s margin): run the leases out in the database, as if the restart had taken that long.
      await db`update subscriptions.deliveries set claimed_until = now() - interval '1 second' where state = 'delivering'`;
      const second = startServiceProcess(env);
      processes.push(second);
      await second.serving;
      // A hang bound: the rest takes seconds; 360 s is far more.
      await until(
        "every event at both receivers",
        () => tally(steady, sent, from).delivered === INCIDENTS && tally(slow, sent, from).delivered === INCIDENTS,
        360_000,
      ).catch(async (err: Error) => {
        const states = await db<{ state: string; attempts: number; n: number }[]>`
          select state, attempt_count as attempts, count(*)::int as n from subscriptions.deliveries group by state, attempt_count order by state, attempt_count`;
        throw new Error(`${err.message}; deliveries by state and attempts: ${JSON.stringify(states)}`);
      });
      // A post the killed process made but could not record is made again once its lease ran out
      // (same webhook-id): wait for those to settle too.
      await until(
        "every delivery settled",
        async () => (await db<{ n: number }[]>`select count(*)::int as n from subscriptions.deliveries where state = 'delivered'`)[0]!.n === INCIDENTS * 2,
        360_000,
      );
      report(`killed mid-storm, steady receiver (${mode})`, tally(steady, sent, from));
      report(`killed mid-storm, slow receiver (${mode})`, tally(slow, sent, from));
      // Every delivery settled as delivered, one per event and subscription, each with the
      // webhook-id its posts carried.
      const rows = await db<{ id: string; state: string; incident: string; url: string }[]>`
        select d.id, d.state, d.payload::jsonb -> 'data' ->> 'incidentId' as incident, s.url
        from subscriptions.deliveries d join subscriptions.subscriptions s on s.id = d.subscription_id`;
      expect(rows).toHaveLength(INCIDENTS * 2);
      expect(rows.filter((r) => r.state !== "delivered")).toEqual([]);
      for (const name of [steady, slow]) {
        const idOf = new Map(rows.filter((r) => r.url === receiver.url(name)).map((r) => [r.incident, r.id]));
        const posted = receiver.deliveries.slice(from).filter((d) => d.endpoint === name);
        expect(posted.filter((d) => idOf.get(String(d.event.data.incidentId)) !== d.webhookId)).toEqual([]);
      }
    } finally {
      for (const p of processes) {
        if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGTERM");
        await p.exited;
      }
      await db.end();
      await ownNats?.cleanup();
      await database.drop();
    }
  }, 480_000);
});

describe("one process started again with events still in its outbox", () => {
  it("hands them to every durable consumer: none is relayed before the consumers have subscribed", async () => {
    const database = await freshDatabase();
    const env = restartableServiceEnv(database.url, "");
    const processes: ServiceProcess[] = [];
    const db = postgres(database.url, { max: 2, onnotice: () => {} });
    const lock = await db.reserve();
    try {
      const first = startServiceProcess(env);
      processes.push(first);
      const firstUrl = (await first.serving).url;
      const { owner: token, ingest } = await ownerAndIngestToken(firstUrl);
      expect((await callApi(firstUrl, "PUT", "/o/acme/oncall/egress", { token, body: { enabled: true } })).status).toBe(200);
      const name = "restart-outbox";
      receiver.endpoint(name, [], () => ({ status: 204 }));
      const subscribed = await callApi(firstUrl, "POST", "/o/acme/subscriptions", { token, body: { url: receiver.url(name), events: ["incident.opened"] } });
      expect(subscribed.status, JSON.stringify(subscribed.body)).toBe(201);

      // The fan-out is held on a lock, so the incident's opened event stays in the outbox (the
      // relay keeps an event until every durable consumer has it) when the process is killed.
      await lock`begin`;
      await lock`lock table subscriptions.deliveries in exclusive mode`;
      const opened = await callApi(firstUrl, "POST", "/triggers", {
        token: ingest,
        body: { alert_type: "error", title: "Restart with events in the outbox", alert_id: "outbox-1", event_id: "e-1", tags: ["service:db"] },
      });
      expect(opened.status).toBe(201);
      // A hang bound, many times what it takes: the fan-out waits on the lock within milliseconds.
      await until(
        "the fan-out waiting on the lock",
        async () =>
          (
            await db<
              { n: number }[]
            >`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%subscriptions.deliveries%'`
          )[0]!.n > 0,
        60_000,
      );
      first.child.kill("SIGKILL");
      await first.exited;
      await lock`rollback`;
      const [left] = await db<{ n: number }[]>`select count(*)::int as n from incidents.outbox where subject like '%incident.opened'`;
      expect(left!.n).toBe(1);

      const second = startServiceProcess(env);
      processes.push(second);
      await second.serving;
      // A hang bound: the event is relayed within a second of the start.
      await until(
        "the opened event at the receiver",
        () => receiver.deliveries.some((d) => d.endpoint === name && d.event.data.incidentId === opened.body.incidentId),
        60_000,
      );
      const [queued] = await db<{ n: number }[]>`select count(*)::int as n from subscriptions.deliveries`;
      expect(queued!.n).toBe(1);
    } finally {
      lock.release();
      for (const p of processes) {
        if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGTERM");
        await p.exited;
      }
      await db.end();
      await database.drop();
    }
  });
});
