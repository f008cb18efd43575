import type { ConnectRouter } from "@connectrpc/connect";
import { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";
import { EVENTS, onEvent } from "../runtime/transport/events.js";
import { serviceSecretBox } from "../runtime/credentials/secret-box.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { createChatWebhookEgress } from "./chat-webhook-delivery.js";
import type { CommsDeps } from "./deps.js";
import { migrations } from "./migrations.js";
import { createCommsRoutes } from "./routes.js";
import { createPostgresCommsStore } from "./store.js";
import { recordPendingTimelineEntries } from "./timeline.js";
import { offerWarRoomLink } from "./war-room-link.js";

/** How often finished sends whose timeline entry is missing are looked for, and how old they must be. */
const TIMELINE_SWEEP_MS = 30_000;
const TIMELINE_SWEEP_AGE_SECONDS = 60;

/**
 * The comms service module: its routes, migrations, the war-room link offered when a chat message
 * opens an incident, and the sweep that writes timeline entries left over by a send.
 */
export function createCommsService(ctx: ServiceContext): ServiceModule {
  const logger = ctx.logger.child({ service: "comms" });
  const deps: CommsDeps = {
    clients: ctx.clients,
    logger,
    config: ctx.config,
    store: createPostgresCommsStore({ sql: ctx.sql, outbox: ctx.outbox }),
    outbox: ctx.outbox,
    egress: createChatWebhookEgress(ctx.config),
    secretBox: serviceSecretBox(ctx.config, logger),
  };
  let sweep: NodeJS.Timeout | undefined;
  let sweeping: Promise<unknown> | undefined;

  return {
    name: "comms",
    migrations,
    services: [CommsService],
    register(router: ConnectRouter) {
      router.service(CommsService, createCommsRoutes(deps));
    },
    async start() {
      await onEvent(ctx.events, EVENTS.incidentOpened, (opened) => offerWarRoomLink(deps, opened), { durableName: "comms-war-room-link" });
      sweep = setInterval(() => {
        if (sweeping) return;
        sweeping = recordPendingTimelineEntries(deps, TIMELINE_SWEEP_AGE_SECONDS)
          .catch((err) => logger.warn({ err: String(err) }, "timeline sweep failed; will retry"))
          .finally(() => (sweeping = undefined));
      }, TIMELINE_SWEEP_MS);
      sweep.unref();
    },
    async stop() {
      if (sweep) clearInterval(sweep);
      await sweeping;
    },
  };
}
