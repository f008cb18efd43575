import type { ConnectRouter } from "@connectrpc/connect";
import { RemoteSourcesService } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { secretBoxFromConfig } from "../runtime/secret-box.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { readEgressCa, remoteSourcePolicy, type RemoteSourceDeps } from "./connections.js";
import { migrations } from "./migrations.js";
import { registerRoutes } from "./routes.js";

/** Connections to remote sources hosted by third parties: saved, tested for conformance, read. */
export function createRemoteSourceService(ctx: ServiceContext): ServiceModule {
  const logger = ctx.logger.child({ service: "remotesource" });
  const ca = readEgressCa(ctx.config);
  const deps: RemoteSourceDeps = {
    ctx: { ...ctx, logger },
    policy: remoteSourcePolicy(ctx.config),
    httpBearerHosts: ctx.config.REMOTE_SOURCE_HTTP_BEARER_HOSTS,
    ...(ca ? { ca } : {}),
    secretBox: secretBoxFromConfig(ctx.config, (file) => {
      if (file.created) logger.warn({ path: file.path }, "SECRETS_KEYS is not set: created a key file for secrets at rest; back it up with the database");
      if (file.loosePermissions) logger.warn({ path: file.path }, "the secrets key file is readable by others than its owner; chmod 600 it");
      if (ctx.config.NATS_URL) logger.warn("SECRETS_KEYS is not set while services run as separate processes: every process needs the same keys");
    }),
  };
  return {
    name: "remotesource",
    migrations,
    services: [RemoteSourcesService],
    register(router: ConnectRouter) {
      registerRoutes(router, deps);
    },
  };
}
