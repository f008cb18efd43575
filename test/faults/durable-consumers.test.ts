import { randomUUID } from "node:crypto";
import { AckPolicy, DeliverPolicy, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJetStreamEventBus, DEAD_LETTER_STREAM, type DomainEvent } from "../../services/runtime/transport/event-bus.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { registry } from "../../services/runtime/observability/metrics.js";
import { freshDatabase } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

/**
 * Durable JetStream consumers never drop an event: not one published before the consumer first
 * existed, and not one whose handler fails for longer than the old 20 tries of 1 s allowed (a
 * database failover). Each case counts sent, handled once, doubled and lost.
 */
const logger = createLogger("silent", "durable-consumers");
let nats: PrivateNats;
const connections: NatsConnection[] = [];

async function natsConnection(): Promise<NatsConnection> {
  const nc = await connect({ servers: nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  connections.push(nc);
  return nc;
}

function events(run: string, subject: string, count: number): DomainEvent[] {
  return Array.from({ length: count }, (_, i) => ({ id: `${run}-${i}`, subject, payload: new TextEncoder().encode(`${run}-${i}`) }));
}

function tally(sent: DomainEvent[], handled: string[]) {
  const counts = new Map<string, number>();
  for (const id of handled) counts.set(id, (counts.get(id) ?? 0) + 1);
  return {
    sent: sent.length,
    foundOnce: sent.filter((e) => counts.get(e.id) === 1).length,
    doubled: sent.filter((e) => (counts.get(e.id) ?? 0) > 1).length,
    lost: sent.filter((e) => !counts.has(e.id)).length,
  };
}

async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`never saw ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  nats = await startPrivateNats();
});

afterAll(async () => {
  for (const nc of connections) await nc.close().catch(() => {});
  await nats?.cleanup();
});

describe("durable consumers", () => {
  it("a durable consumer created after events were published still gets every one of them", async () => {
    const publisher = await createJetStreamEventBus(await natsConnection(), logger);
    const sent = events(randomUUID(), "events.probe.before", 25);
    expect((await publisher.publishMany(sent)).every((e) => e === undefined)).toBe(true);

    // A service deployed later (or a consumer added in a new release) subscribes only now.
    const late = await createJetStreamEventBus(await natsConnection(), logger);
    const handled: string[] = [];
    await late.subscribe("events.probe.before", async (e) => void handled.push(e.id), { durableName: "late-consumer" });
    await until("every event published before the consumer existed", async () => handled.length >= sent.length, 15_000);
    await new Promise((r) => setTimeout(r, 300));
    expect(tally(sent, handled)).toEqual({ sent: 25, foundOnce: 25, doubled: 0, lost: 0 });
    await late.close();
  });

  it("a durable consumer created by an older release loses its delivery limit", async () => {
    const nc = await natsConnection();
    await createJetStreamEventBus(nc, logger);
    const jsm = await jetstreamManager(nc);
    // As the previous release created its consumers.
    await jsm.consumers.add("EVENTS", {
      durable_name: "older-release",
      filter_subject: "events.probe.older",
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.New,
      max_deliver: 20,
      ack_wait: 30_000_000_000,
    });
    const bus = await createJetStreamEventBus(nc, logger);
    const handled: string[] = [];
    await bus.subscribe("events.probe.older", async (e) => void handled.push(e.id), { durableName: "older-release" });
    const info = await jsm.consumers.info("EVENTS", "older-release");
    expect(info.config.max_deliver).toBe(-1);
    const sent = events(randomUUID(), "events.probe.older", 3);
    await bus.publishMany(sent);
    await until("the events on the upgraded consumer", async () => handled.length >= 3, 10_000);
    expect(tally(sent, handled)).toEqual({ sent: 3, foundOnce: 3, doubled: 0, lost: 0 });
    await bus.close();
  });

  it("a consumer failing through a database outage longer than 20 s does not lose the event", async () => {
    const database = await freshDatabase();
    const db = postgres(database.url, { max: 2, onnotice: () => {} });
    try {
      await db`create table handled (event_id text primary key, n integer not null default 1)`;
      const bus = await createJetStreamEventBus(await natsConnection(), logger);
      // The outage as the consumer sees it during a failover: every call fails at once (connection
      // refused) for 25 s. Failing fast is the hard case: the old limit of 20 deliveries a second
      // apart ran out after about 20 s.
      const outageEnds = Date.now() + 25_000;
      let failures = 0;
      await bus.subscribe(
        "events.probe.outage",
        async (e) => {
          if (Date.now() < outageEnds) {
            failures++;
            throw new Error("connect ECONNREFUSED 127.0.0.1:5432");
          }
          // An idempotent consumer: a repeat would count in n, not add a row.
          await db`insert into handled (event_id) values (${e.id}) on conflict (event_id) do update set n = handled.n + 1`;
        },
        { durableName: "outage-consumer" },
      );

      const sent = events(randomUUID(), "events.probe.outage", 5);
      expect((await bus.publishMany(sent)).every((e) => e === undefined)).toBe(true);
      const rows = await until(
        "the events handled once the outage is over",
        async () => {
          const found = await db<{ event_id: string; n: number }[]>`select event_id, n from handled`;
          return found.length >= sent.length ? found : undefined;
        },
        90_000,
      );
      expect(Date.now()).toBeGreaterThan(outageEnds);
      expect(failures).toBeGreaterThanOrEqual(sent.length);
      await new Promise((r) => setTimeout(r, 500));
      const again = await db<{ event_id: string; n: number }[]>`select event_id, n from handled`;
      const handled = again.flatMap((r) => Array.from({ length: r.n }, () => r.event_id));
      expect(tally(sent, handled)).toEqual({ sent: 5, foundOnce: 5, doubled: 0, lost: 0 });
      expect(rows.length).toBe(5);
      await bus.close();
    } finally {
      await db.end({ timeout: 1 });
      await database.drop();
    }
  }, 120_000);

  it("copies an event that keeps failing to the dead-letter stream, counts it, and still retries it", async () => {
    const nc = await natsConnection();
    const bus = await createJetStreamEventBus(nc, logger, { retry: { baseMs: 50, maxMs: 200, deadLetterAfter: 3 } });
    const [poison] = events(randomUUID(), "events.probe.poison", 1);
    let healed = false;
    let deliveries = 0;
    const handled: string[] = [];
    await bus.subscribe(
      "events.probe.poison",
      async (e) => {
        deliveries++;
        if (!healed) throw new Error("handler bug\nat line 2");
        handled.push(e.id);
      },
      { durableName: "poison-consumer" },
    );
    await bus.publish(poison!);
    const jsm = await jetstreamManager(nc);
    const copy = await until(
      "the dead-letter copy",
      async () => {
        const info = await jsm.streams.info(DEAD_LETTER_STREAM);
        return info.state.messages > 0
          ? jsm.streams.getMessage(DEAD_LETTER_STREAM, { last_by_subj: "deadletter.poison-consumer.events.probe.poison" })
          : undefined;
      },
      15_000,
    );
    expect(copy!.header.get("Warroom-Original-Id")).toBe(poison!.id);
    expect(copy!.header.get("Warroom-Original-Subject")).toBe("events.probe.poison");
    expect(copy!.header.get("Warroom-Error")).toBe("handler bug at line 2");
    expect(new TextDecoder().decode(copy!.data)).toBe(poison!.id);
    expect(await registry.getSingleMetricAsString("warroom_event_dead_letters_total")).toContain(
      'warroom_event_dead_letters_total{consumer="poison-consumer"} 1',
    );

    // Still retried: once the handler is fixed, the event is handled, and copied only once.
    await until("more deliveries after the copy", async () => deliveries > 4, 10_000);
    healed = true;
    await until("the event handled after the fix", async () => handled.length === 1, 10_000);
    expect((await jsm.streams.info(DEAD_LETTER_STREAM)).state.messages).toBe(1);
    await bus.close();
  });
});
