import type { ConnectRouter } from "@connectrpc/connect";
import { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { migrations } from "./migrations.js";
import { createIngestTokenResolver } from "../runtime/credentials/ingest-token-cache.js";
import { serviceSecretBox } from "../runtime/credentials/secret-box.js";
import { createHeartbeatsRoutes } from "./routes.js";
import { givePingKeys } from "./ping/ping-key.js";
import { createSilenceDelivery } from "./silence-delivery.js";
import { createPostgresHeartbeatStore } from "./store.js";
import { createSweeper } from "./sweep.js";

/** Registered jobs that ping; a sweep opens an incident, through the incident core, for each silence. */
export function createHeartbeatsService(ctx: ServiceContext): ServiceModule {
  const { sql, clients, outbox, config } = ctx;
  const logger = ctx.logger.child({ service: "heartbeats" });
  const store = createPostgresHeartbeatStore({ sql, outbox, logger });
  const delivery = createSilenceDelivery({ store, clients, logger });
  // Sweeps detect on a small pool of their own: a sweep never takes a connection from a request.
  const sweeper = createSweeper({ store: createPostgresHeartbeatStore({ sql: ctx.backgroundSql, outbox, logger }), outbox, delivery, logger });
  const ingestTokens = createIngestTokenResolver({ clients, broadcast: ctx.broadcast });
  // Pings get a pool of their own (as large as the shared one), so that a sweep, its deliveries
  // and the outbox relay never make a ping wait for a connection. Its one statement keeps its
  // cached plan: planning it on every call doubled Postgres's CPU per ping (0.089 -> 0.155 ms in
  // `npm run bench -- heartbeats`), and the heartbeats table grows by registrations, which
  // autovacuum's analyze (and with it a new plan) follows, not by a storm.
  const pingSql = ctx.openPool("warroom-pings", config.DATABASE_POOL_SIZE, "cached");
  // The public address is read at each call: a process without PUBLIC_URL learns its port only
  // once it listens.
  const pingUrls = { box: serviceSecretBox(config, logger), publicUrl: () => config.publicUrl };
  const routes = createHeartbeatsRoutes({ sql, pingSql, store, clients, outbox, ingestTokens, delivery, sweeper, pingUrls, logger });

  return {
    name: "heartbeats",
    migrations,
    services: [HeartbeatsService],
    register(router: ConnectRouter) {
      router.service(HeartbeatsService, routes);
    },
    async start() {
      await givePingKeys(store, pingUrls.box, logger);
      sweeper.start(config.HEARTBEAT_SWEEP_SECONDS);
    },
    async stop() {
      await sweeper.stop();
      await delivery.settle();
      await pingSql.end({ timeout: 5 });
    },
  };
}
