import type { ConnectRouter } from "@connectrpc/connect";
import { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import type { IncidentsDeps } from "./deps.js";
import { migrations } from "./migrations.js";
import { createIncidentsRoutes } from "./routes.js";

/** The incident core: incidents, timelines, attach identities, event identifiers, maintenance windows. */
export function createIncidentsService(ctx: ServiceContext): ServiceModule {
  const deps: IncidentsDeps = { sql: ctx.sql, config: ctx.config, clients: ctx.clients, outbox: ctx.outbox };
  return {
    name: "incidents",
    migrations,
    services: [IncidentsService],
    register(router: ConnectRouter) {
      router.service(IncidentsService, createIncidentsRoutes(deps));
    },
  };
}
