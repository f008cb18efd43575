import { create, fromBinary } from "@bufbuild/protobuf";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IncidentOpenedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { createInMemoryEventBus, createJetStreamEventBus, type DomainEvent, type EventBus } from "../../services/runtime/transport/event-bus.js";
import { EVENTS } from "../../services/runtime/transport/events.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { migrate } from "../../services/runtime/data/migrations.js";
import { createOutboxRelay, outboxMigration, outboxUpgrades } from "../../services/runtime/data/outbox.js";
import { freshDatabase } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

/**
 * A durable subscriber's `concurrency` on both buses, fed by the real outbox relay: N events with
 * concurrency K are each handled exactly once, never more than K at a time, and one that fails is
 * retried (by the relay in one process, by JetStream over NATS). A subscriber beside it at the
 * default (1) still sees every event once, one at a time, in outbox order.
 */
const logger = createLogger("silent", "event-bus-concurrency");
const EVENT_COUNT = 60;
const CONCURRENCY = 4;
/** Each handler holds its slot this long, so that handlers overlap when they may. */
const HOLD_MS = 15;

let database: Awaited<ReturnType<typeof freshDatabase>>;
let sql: postgres.Sql;
let nats: PrivateNats;
const connections: NatsConnection[] = [];

beforeAll(async () => {
  database = await freshDatabase();
  sql = postgres(database.url, { max: 4, onnotice: () => {} });
  nats = await startPrivateNats();
});

afterAll(async () => {
  for (const nc of connections) await nc.close().catch(() => {});
  await nats?.cleanup();
  await sql?.end();
  await database?.drop();
});

async function until(what: string, probe: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`never saw ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const titleOf = (event: DomainEvent) => fromBinary(IncidentOpenedSchema, event.payload).title;

const buses: [string, () => Promise<EventBus>][] = [
  ["in one process", async () => createInMemoryEventBus(logger)],
  [
    "over JetStream",
    async () => {
      const nc = await connect({ servers: nats.url });
      connections.push(nc);
      return createJetStreamEventBus(nc, logger, { retry: { baseMs: 50, maxMs: 200 } });
    },
  ],
];

describe.each(buses)("a durable subscriber with a concurrency, %s", (mode, makeBus) => {
  it(`handles ${EVENT_COUNT} events each once, at most ${CONCURRENCY} at a time, and retries the one that fails`, async () => {
    const schema = mode === "in one process" ? "concurrency_memory" : "concurrency_jetstream";
    await migrate(sql, schema, [outboxMigration(schema, 1), ...outboxUpgrades(schema)]);
    const bus = await makeBus();
    const run = `${schema}-${Date.now()}`;
    const titles = Array.from({ length: EVENT_COUNT }, (_, i) => `${run}-${i}`);
    const failing = titles[7]!;

    let active = 0;
    let mostActive = 0;
    const attempts = new Map<string, number>();
    const handled: string[] = [];
    await bus.subscribe(
      EVENTS.incidentOpened.subject,
      async (event) => {
        const title = titleOf(event);
        if (!title.startsWith(run)) return;
        active++;
        mostActive = Math.max(mostActive, active);
        try {
          attempts.set(title, (attempts.get(title) ?? 0) + 1);
          await new Promise((r) => setTimeout(r, HOLD_MS));
          if (title === failing && attempts.get(title) === 1) throw new Error("fails on its first try");
          handled.push(title);
        } finally {
          active--;
        }
      },
      { durableName: `${schema}-parallel`, concurrency: CONCURRENCY },
    );

    let orderedActive = 0;
    let orderedMostActive = 0;
    const ordered: string[] = [];
    await bus.subscribe(
      EVENTS.incidentOpened.subject,
      async (event) => {
        const title = titleOf(event);
        if (!title.startsWith(run)) return;
        orderedActive++;
        orderedMostActive = Math.max(orderedMostActive, orderedActive);
        await new Promise((r) => setTimeout(r, 1));
        ordered.push(title);
        orderedActive--;
      },
      { durableName: `${schema}-in-order` },
    );

    const relay = createOutboxRelay({ sql, schema, bus, logger, intervalMs: 50, retryBaseMs: 50, retryMaxMs: 200 });
    await sql.begin((tx) =>
      relay.writeMany(
        tx,
        EVENTS.incidentOpened,
        titles.map((title) => create(IncidentOpenedSchema, { orgId: "org", incidentId: title, title })),
      ),
    );
    relay.start();
    try {
      // A hang bound: the events take about a second to handle; 30 s is far beyond that.
      await until("every event handled by both subscribers", () => handled.length >= EVENT_COUNT && ordered.length >= EVENT_COUNT, 30_000);
      // Anything doubled would arrive just after the last one: give it the time of a few retries.
      await new Promise((r) => setTimeout(r, 500));
    } finally {
      await relay.stop();
      await bus.close();
    }

    const counts = new Map<string, number>();
    for (const title of handled) counts.set(title, (counts.get(title) ?? 0) + 1);
    expect({ handledOnce: titles.filter((t) => counts.get(t) === 1).length, doubled: titles.filter((t) => (counts.get(t) ?? 0) > 1).length }).toEqual({
      handledOnce: EVENT_COUNT,
      doubled: 0,
    });
    expect(handled.length).toBe(EVENT_COUNT);
    expect(attempts.get(failing)).toBe(2);
    expect(mostActive).toBeLessThanOrEqual(CONCURRENCY);
    // It did run handlers side by side (each holds its slot for HOLD_MS while 60 events wait).
    expect(mostActive).toBeGreaterThan(1);

    // The default subscriber: each event once, one at a time, in the order written.
    expect(ordered).toEqual(titles);
    expect(orderedMostActive).toBe(1);
  });
});
