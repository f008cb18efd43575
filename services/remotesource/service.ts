import type { ConnectRouter } from "@connectrpc/connect";
import { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { serviceSecretBox } from "../runtime/credentials/secret-box.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { readEgressCa, remoteSourcePolicy } from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";
import { migrations } from "./migrations.js";
import { consumeIncidentOpened, createInvestigator } from "./investigation.js";
import { investigationRetention } from "./retention.js";
import { createRemoteSourcesRoutes } from "./routes.js";
import { startRetentionSweep } from "../runtime/data/retention-sweep.js";
import { investigationBacklog, investigationsWaiting } from "../runtime/observability/metrics.js";

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
    broadcast: ctx.broadcast,
    policy: remoteSourcePolicy(ctx.config),
    httpBearerHosts: ctx.config.REMOTE_SOURCE_HTTP_BEARER_HOSTS,
    ...(ca ? { ca } : {}),
    secretBox: serviceSecretBox(ctx.config, logger),
  };
  const investigator = createInvestigator(deps);
  let retention: { stop(): Promise<void> } | undefined;
  return {
    name: "remotesource",
    migrations,
    services: [RemoteSourcesService],
    register(router: ConnectRouter) {
      router.service(RemoteSourcesService, createRemoteSourcesRoutes({ ...deps, pokeInvestigator: investigator.poke }));
    },
    async start() {
      investigator.start();
      retention = startRetentionSweep({ sql: ctx.backgroundSql, logger, rules: investigationRetention(ctx.config.INVESTIGATION_RETENTION_DAYS) });
      await consumeIncidentOpened(deps, ctx.events, investigator.poke);
    },
    async stop() {
      await investigator.stop();
      await retention?.stop();
    },
    async measure() {
      const [row] = await ctx.backgroundSql<{ waiting: number; oldest_seconds: number | null }[]>`
        select count(*)::int as waiting, extract(epoch from now() - min(created_at))::float8 as oldest_seconds
        from remotesource.investigations where state in ('pending', 'running')`;
      investigationsWaiting.set(row?.waiting ?? 0);
      investigationBacklog.set(Math.max(0, row?.oldest_seconds ?? 0));
    },
  };
}
