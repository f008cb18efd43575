import type { ConnectRouter } from "@connectrpc/connect";
import { SubscriptionsService } from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";
import { serviceSecretBox } from "../runtime/credentials/secret-box.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { createDeliveryWorker, measureBacklog } from "./delivery-worker.js";
import type { SubscriptionsDeps } from "./deps.js";
import { startFanOut } from "./fan-out.js";
import { migrations } from "./migrations.js";
import { createSubscriptionsRoutes } from "./routes.js";
import { createSubscriptionEgress, MAX_IN_FLIGHT } from "./send.js";

/**
 * Signed event subscriptions: the routes, the fan-out of domain events into deliveries, and the
 * worker that sends them with retries.
 */
export function createSubscriptionsService(ctx: ServiceContext): ServiceModule {
  const logger = ctx.logger.child({ service: "subscriptions" });
  let poke = () => {};
  const deps: SubscriptionsDeps = {
    sql: ctx.sql,
    clients: ctx.clients,
    outbox: ctx.outbox,
    broadcast: ctx.broadcast,
    logger,
    config: ctx.config,
    egress: createSubscriptionEgress(ctx.config),
    secretBox: serviceSecretBox(ctx.config, logger),
    pokeWorker: () => poke(),
  };
  // Retries come due on their own (an idle worker looks every fourth time), and a claim skips a subscription whose row another claim or a
  // failure's bookkeeping holds for a moment: look again often, and at least twice per shortest wait.
  const shortestWaitMs = Math.min(...ctx.config.SUBSCRIPTION_RETRY_SCHEDULE_SECONDS) * 1000;
  const worker = createDeliveryWorker(deps, { maxInFlight: MAX_IN_FLIGHT, pollMs: Math.min(250, Math.max(50, shortestWaitMs / 2)) });
  poke = worker.poke;

  return {
    name: "subscriptions",
    migrations,
    services: [SubscriptionsService],
    register(router: ConnectRouter) {
      router.service(SubscriptionsService, createSubscriptionsRoutes(deps));
    },
    async start() {
      worker.start();
      await startFanOut(deps, ctx.events);
    },
    async stop() {
      await worker.stop();
      deps.egress.close();
    },
    measure: () => measureBacklog(ctx.backgroundSql),
  };
}
