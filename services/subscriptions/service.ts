import type { ConnectRouter } from "@connectrpc/connect";
import { SubscriptionsService } from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";
import { serviceSecretBox } from "../runtime/credentials/secret-box.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { createDeliveryWorker } from "./delivery-worker.js";
import type { SubscriptionsDeps } from "./deps.js";
import { startFanOut } from "./fan-out.js";
import { migrations } from "./migrations.js";
import { createSubscriptionsRoutes } from "./routes.js";
import { createSubscriptionEgress, MAX_IN_FLIGHT } from "./send.js";
import type { Sql } from "../runtime/data/database.js";
import { subscriptionBacklog, subscriptionDeliveriesWaiting } from "../runtime/observability/metrics.js";

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

/**
 * The sender's backlog, for an alert on a storm outrunning it: the deliveries not yet settled
 * (counted over the index of those waiting, up to a million), and how long the longest-due
 * delivery has been due. A delivery waiting for its retry to a receiver that is down is not due,
 * so a down receiver alone does not raise the second.
 */
async function measureBacklog(sql: Sql): Promise<void> {
  const [row] = await sql<{ waiting: number; due_seconds: number | null }[]>`
    select
      (select count(*)::int from (
        select 1 from subscriptions.deliveries where state in ('pending', 'delivering') limit 1000000) w) as waiting,
      (select extract(epoch from now() - min(due.at))::float8 from subscriptions.subscriptions s
        cross join lateral (
          select d.next_attempt_at as at from subscriptions.deliveries d
          where d.subscription_id = s.id and d.state in ('pending', 'delivering') and d.next_attempt_at <= now()
            and (d.state = 'pending' or d.claimed_until < now())
          order by d.next_attempt_at limit 1) due
        where s.state = 'enabled') as due_seconds`;
  subscriptionDeliveriesWaiting.set(row?.waiting ?? 0);
  subscriptionBacklog.set(Math.max(0, row?.due_seconds ?? 0));
}
