import type { ConnectRouter } from "@connectrpc/connect";
import { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { serviceSecretBox } from "../runtime/secret-box.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { readEgressCa, remoteSourcePolicy } from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";
import { migrations } from "./migrations.js";
import { consumeIncidentOpened, createInvestigator } from "./investigation.js";
import { createRemoteSourcesRoutes } from "./routes.js";

/**
 * Connections to remote sources hosted by third parties: saved, tested for conformance, read, and
 * read on their own by the investigation of each incident that opens.
 */
export function createRemoteSourceService(ctx: ServiceContext): ServiceModule {
  const logger = ctx.logger.child({ service: "remotesource" });
  const ca = readEgressCa(ctx.config);
  const deps: RemoteSourceDeps = {
    sql: ctx.sql,
    clients: ctx.clients,
    outbox: ctx.outbox,
    logger,
    policy: remoteSourcePolicy(ctx.config),
    httpBearerHosts: ctx.config.REMOTE_SOURCE_HTTP_BEARER_HOSTS,
    ...(ca ? { ca } : {}),
    secretBox: serviceSecretBox(ctx.config, logger),
  };
  const investigator = createInvestigator(deps);
  return {
    name: "remotesource",
    migrations,
    services: [RemoteSourcesService],
    register(router: ConnectRouter) {
      router.service(RemoteSourcesService, createRemoteSourcesRoutes({ ...deps, pokeInvestigator: investigator.poke }));
    },
    async start() {
      investigator.start();
      await consumeIncidentOpened(deps, ctx.events, investigator.poke);
    },
    async stop() {
      await investigator.stop();
    },
  };
}
