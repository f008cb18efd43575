import type { ConnectRouter } from "@connectrpc/connect";
import { IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { createFairShares } from "./fair-shares.js";
import { createLargeBodyBudget } from "./large-body-budget.js";
import { type SecretBox, serviceSecretBox } from "../runtime/credentials/secret-box.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { startRetentionSweep } from "../runtime/data/retention-sweep.js";
import { createRecordWriter } from "./custom-sources/custom-source-delivery.js";
import { createLargeBodies } from "./custom-sources/large-bodies.js";
import { groupingGenerationRetention } from "./grouping/generation-retention.js";
import { createDeliveryRecordStore } from "./custom-sources/store.js";
import { migrations } from "./migrations.js";
import { HOLD_SECONDS } from "./retry-recognition.js";
import { recordInGroups } from "./record-groups.js";
import { createIntakeRoutes } from "./routes.js";
import { createPostgresIntakeStore } from "./store.js";

const FORGET_EVERY_MS = 10 * 60_000;

/**
 * The intake service module: the trigger routes and drop-in receivers, their authentication and
 * limits, and a timer that forgets expired retry keys.
 */
export function createIntakeService(ctx: ServiceContext): ServiceModule {
  const { clients, logger, broadcast } = ctx;
  const store = createPostgresIntakeStore(ctx.sql, ctx.outbox);
  const customSourceRecords = createRecordWriter(createDeliveryRecordStore(ctx.sql), logger);
  // Made when first needed: only sources that check signatures need keys (SECRETS_KEYS).
  let secretBox: (() => SecretBox) | undefined;
  const customSourceSecrets = (): SecretBox => {
    secretBox ??= serviceSecretBox(ctx.config, logger);
    return secretBox();
  };
  const largeBodies = ctx.config.INTAKE_LARGE_BODY_WORKERS > 0 ? createLargeBodies({ workers: ctx.config.INTAKE_LARGE_BODY_WORKERS, logger }) : undefined;
  const routes = createIntakeRoutes({
    clients,
    store,
    logger,
    broadcast,
    customSources: {
      sql: ctx.sql,
      outbox: ctx.outbox,
      publicUrl: ctx.config.publicUrl,
      broadcast,
      records: customSourceRecords,
      largeBodies,
      secretBox: customSourceSecrets,
      logger,
    },
    shares: createFairShares({
      perOrg: ctx.config.INTAKE_ORG_IN_FLIGHT,
      total: ctx.config.INTAKE_IN_FLIGHT,
      waitMs: ctx.config.INTAKE_SHARE_WAIT_MS,
      maxWaiting: ctx.config.INTAKE_MAX_WAITING,
    }),
    recordCall: ctx.transport === "nats" ? recordInGroups(clients.incidents) : undefined,
    largeBodyBudget: createLargeBodyBudget({ bytesPerSecond: ctx.config.INTAKE_LARGE_BODY_BYTES_PER_SECOND, maxWaitMs: ctx.config.INTAKE_SHARE_WAIT_MS }),
  });
  let forgetTimer: NodeJS.Timeout | undefined;
  let retention: { stop(): Promise<void> } | undefined;
  return {
    name: "intake",
    migrations,
    services: [IntakeService],
    register(router: ConnectRouter) {
      router.service(IntakeService, routes);
    },
    async start() {
      const forget = () =>
        store.retryKeys.forgetExpired(HOLD_SECONDS).then(
          (count) => count > 0 && logger.debug({ count }, "forgot expired retry keys"),
          (err: unknown) => logger.warn({ err }, "could not forget expired retry keys"),
        );
      forgetTimer = setInterval(forget, FORGET_EVERY_MS);
      forgetTimer.unref();
      retention = startRetentionSweep({
        sql: ctx.backgroundSql,
        logger,
        rules: groupingGenerationRetention(ctx.config.GROUPING_GENERATION_RETENTION_DAYS),
      });
    },
    async stop() {
      clearInterval(forgetTimer);
      await retention?.stop();
      // What this process answered keeps its payload and log row.
      await customSourceRecords.flush();
      await largeBodies?.close();
    },
  };
}
