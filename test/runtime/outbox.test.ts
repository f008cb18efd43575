import { create, fromBinary } from "@bufbuild/protobuf";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IncidentOpenedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { createInMemoryEventBus, createJetStreamEventBus, EVENTS_STREAM, type DomainEvent } from "../../services/runtime/event-bus.js";
import { createLogger } from "../../services/runtime/logger.js";
import { migrate } from "../../services/runtime/migrations.js";
import { createOutboxRelay, outboxMigration, outboxTraceContextMigration } from "../../services/runtime/outbox.js";
import { freshDatabase } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";

const logger = createLogger("silent", "outbox-test");
const event = (title: string) => create(IncidentOpenedSchema, { orgId: "org", incidentId: title, title });

let database: Awaited<ReturnType<typeof freshDatabase>>;
let sql: postgres.Sql;

beforeAll(async () => {
  database = await freshDatabase();
  sql = postgres(database.url, { max: 4, onnotice: () => {} });
  await migrate(sql, "probe", [outboxMigration("probe", 1), outboxTraceContextMigration("probe", 2)]);
});

afterAll(async () => {
  await sql?.end();
  await database?.drop();
});

async function streamMessages(nc: NatsConnection): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.streams.info(EVENTS_STREAM)).state.messages;
}

describe("the outbox", () => {
  it("delivers to in-process subscribers in one-process mode", async () => {
    const bus = createInMemoryEventBus(logger);
    const seen: DomainEvent[] = [];
    await bus.subscribe("events.incident.>", async (e) => void seen.push(e));
    const relay = createOutboxRelay({ sql, schema: "probe", bus, logger });
    await sql.begin((tx) => relay.write(tx, "events.incident.opened", IncidentOpenedSchema, event("in-process")));
    await relay.drain();
    expect(seen.map((e) => fromBinary(IncidentOpenedSchema, e.payload).title)).toEqual(["in-process"]);
  });

  describe("over JetStream", () => {
    let nats: PrivateNats;
    beforeAll(async () => {
      nats = await startPrivateNats();
    });
    afterAll(async () => {
      await nats?.cleanup();
    });

    it("keeps an event committed while NATS is down and publishes it once NATS is back", async () => {
      const nc = await connect({ servers: nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      const bus = await createJetStreamEventBus(nc, logger);
      const relay = createOutboxRelay({ sql, schema: "probe", bus, logger });
      await relay.drain();
      const before = await streamMessages(nc);

      await nats.stop();
      await sql.begin((tx) => relay.write(tx, "events.incident.opened", IncidentOpenedSchema, event("while-down")));
      await expect(relay.drain()).rejects.toThrow();
      const [pending] = await sql`select count(*)::int as n from probe.outbox where published_at is null`;
      expect(pending!.n).toBe(1);

      await nats.start();
      const deadline = Date.now() + 15_000;
      for (;;) {
        try {
          if ((await relay.drain()) === 1) break;
        } catch {
          /* still reconnecting */
        }
        if (Date.now() > deadline) throw new Error("the relay never published after NATS came back");
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(await streamMessages(nc)).toBe(before + 1);
      const [left] = await sql`select count(*)::int as n from probe.outbox where published_at is null`;
      expect(left!.n).toBe(0);
      await nc.close();
    }, 40_000);

    it("lets the stream drop the duplicate when the relay dies between publishing and marking", async () => {
      const nc = await connect({ servers: nats.url });
      const bus = await createJetStreamEventBus(nc, logger);
      let crash = true;
      const relay = createOutboxRelay({
        sql,
        schema: "probe",
        bus,
        logger,
        afterPublish: async () => {
          if (crash) {
            crash = false;
            throw new Error("relay killed before marking the rows");
          }
        },
      });
      const before = await streamMessages(nc);
      await sql.begin(async (tx) => {
        await relay.write(tx, "events.incident.opened", IncidentOpenedSchema, event("a"));
        await relay.write(tx, "events.incident.opened", IncidentOpenedSchema, event("b"));
      });
      await expect(relay.drain()).rejects.toThrow("relay killed");
      // Both were published, neither was marked: the next run publishes them again...
      expect(await relay.drain()).toBe(2);
      // ...and the stream keeps one copy of each, by Nats-Msg-Id.
      expect(await streamMessages(nc)).toBe(before + 2);
      await nc.close();
    }, 30_000);
  });
});
