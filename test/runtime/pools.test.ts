import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BACKGROUND_POOL_SIZE } from "../../services/runtime/data/database.js";
import { OWNER, startApp, type TestApp } from "../support/app.js";

/**
 * Background work (outbox relays, the heartbeat sweep) has a pool of its own: however long it
 * holds its connections, a delivery never waits for one of them.
 */

let app: TestApp;
let ingestToken: string;

beforeAll(async () => {
  app = await startApp();
  const token = await app.ownerToken();
  const issued = await app.call("POST", `/o/${OWNER.org}/triggers/ingest-token`, { token });
  ingestToken = issued.body.token as string;
});

afterAll(async () => {
  await app?.stop();
});

const body = (n: number) => ({
  title: `[Triggered on {host:web-${n}}] High CPU on web hosts`,
  body: "CPU above 90% for 5 minutes",
  alert_id: `pool-${n}`,
  alert_transition: "Triggered",
  alert_type: "error",
  alert_priority: "P2",
  event_id: `pool-e${n}`,
  tags: ["env:prod", "service:checkout"],
});

describe("connection pools", () => {
  it("answers deliveries while background work holds every background connection, and the events follow", async () => {
    const background = app.process.background.sql;
    expect(background).not.toBe(app.process.database.sql);
    // Background work stuck in the database (a long sweep, a relay behind a slow bus): every
    // connection of its pool taken, until the deliveries below have been answered. A delivery that
    // needed one of them would wait for ever, so the deliveries' answers arriving at all, while
    // the pool is still taken, is the proof (no clock decides it).
    const reserved = await Promise.all(Array.from({ length: BACKGROUND_POOL_SIZE }, () => background.reserve()));
    let answers: Awaited<ReturnType<TestApp["call"]>>[];
    try {
      for (const connection of reserved) await connection`select 1`;
      const delivered = Promise.all(
        Array.from({ length: 30 }, (_, n) => app.call("POST", "/triggers", { headers: { authorization: `Bearer ${ingestToken}` }, body: body(n) })),
      );
      // A hang detector, not a budget: 30 deliveries take well under a second; 60 s means they
      // wait for the background pool.
      let timer: NodeJS.Timeout | undefined;
      const hung = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("the deliveries wait for the background pool")), 60_000);
      });
      answers = await Promise.race([delivered, hung]).finally(() => clearTimeout(timer));
    } catch (err) {
      for (const connection of reserved) connection.release();
      throw err;
    }
    expect(answers.map((a) => a.status)).toEqual(Array(30).fill(201));

    const sql = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    try {
      // The relays run on the background pool: while it is held, the events wait...
      const [held] = await sql<{ waiting: number }[]>`select count(*)::int as waiting from incidents.outbox where published_at is null`;
      expect(held!.waiting).toBe(60);
      for (const connection of reserved) connection.release();
      // ...and once it is free again, every one is published (a hang detector: under a second
      // on an idle machine, 60 s means never).
      const deadline = Date.now() + 60_000;
      for (;;) {
        const [row] = await sql<{ waiting: number }[]>`select count(*)::int as waiting from incidents.outbox where published_at is null`;
        if (row!.waiting === 0) break;
        if (Date.now() > deadline) throw new Error(`${row!.waiting} events still unpublished`);
        await new Promise((r) => setTimeout(r, 100));
      }
      // A row leaves the outbox when it is published or when it becomes a dead letter.
      const [dead] = await sql<{ n: number }[]>`select count(*)::int as n from incidents.outbox_dead_letters`;
      expect(dead!.n).toBe(0);
    } finally {
      await sql.end();
    }
  }, 180_000);

  it("publishes an event whose in-process subscriber writes to the database while another background connection is held", async () => {
    // One-process mode runs subscribers inside the relay's publish, and the relay holds a
    // background connection in its transaction meanwhile. A subscriber that needed a background
    // connection too would wait for itself once the others were taken.
    const held = await app.process.background.sql.reserve();
    try {
      const token = `pool-sns-${Date.now()}`;
      const confirmation = {
        Type: "SubscriptionConfirmation",
        MessageId: token,
        Token: token,
        TopicArn: "arn:aws:sns:us-east-1:123456789012:ops-alarms",
        Message: "You have chosen to subscribe to the topic.",
        SubscribeURL: "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription",
        Timestamp: "2024-06-12T10:00:00.000Z",
      };
      const res = await app.call("POST", "/triggers", {
        headers: { authorization: `Bearer ${ingestToken}`, "content-type": "text/plain" },
        raw: JSON.stringify(confirmation),
      });
      expect(res.status).toBe(200);
      const sql = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
      try {
        const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
        for (;;) {
          const [row] = await sql<{ n: number }[]>`select count(*)::int as n from identity.audit_events where data->>'token' = ${token}`;
          if (row!.n === 1) break;
          if (Date.now() > deadline) throw new Error("the audit record did not arrive while a background connection was held");
          await new Promise((r) => setTimeout(r, 100));
        }
      } finally {
        await sql.end();
      }
    } finally {
      held.release();
    }
  });

  it("runs background work under its own application name, so an operator can tell the pools apart", async () => {
    const [row] = await app.process.background.sql<{ name: string }[]>`select current_setting('application_name') as name`;
    expect(row!.name).toBe("warroom-background");
    const [delivery] = await app.process.database.sql<{ name: string }[]>`select current_setting('application_name') as name`;
    expect(delivery!.name).toBe("warroom");
  });
});
