import type { ConnectRouter } from "@connectrpc/connect";
import { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import type { IncidentsDeps } from "./deps.js";
import { migrations } from "./migrations.js";
import { createEscalationSweeper } from "./escalation/escalation-sweep.js";
import { createIncidentsRoutes } from "./routes.js";

/**
 * Connections of the deliveries' pool. Record's group commit has at most two groups or deliveries
 * in flight, and RecordMany (the sweep) two batches; what a group leaves to Record alone waits
 * for a connection here, never for one of the shared pool.
 */
export const DELIVERY_POOL_SIZE = 4;

/** The incident core: incidents, timelines, attach identities, event identifiers, maintenance windows. */
export function createIncidentsService(ctx: ServiceContext): ServiceModule {
  // Record's and RecordMany's statements read every row through the one index that fits it (an
  // open incident by its key, incidents by primary key, windows by organization), so they keep
  // one plan per connection (database.ts).
  const deliverySql = ctx.openPool("warroom-deliveries", DELIVERY_POOL_SIZE, "kept, by index");
  const deps: IncidentsDeps = { sql: ctx.sql, deliverySql, config: ctx.config, clients: ctx.clients, outbox: ctx.outbox, logger: ctx.logger };
  // Acknowledgement deadlines are swept on the background pool, in every replica (the step's row decides who sends it).
  const escalations = createEscalationSweeper({ sql: ctx.backgroundSql, outbox: ctx.outbox, logger: ctx.logger.child({ service: "incidents" }) });
  return {
    name: "incidents",
    migrations,
    services: [IncidentsService],
    register(router: ConnectRouter) {
      router.service(IncidentsService, createIncidentsRoutes(deps));
    },
    async start() {
      escalations.start(ctx.config.ESCALATION_SWEEP_SECONDS);
    },
    async stop() {
      await escalations.stop();
      await deliverySql.end({ timeout: 5 });
    },
  };
}
