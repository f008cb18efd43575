import type { ConnectRouter } from "@connectrpc/connect";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { EVENTS, onEvent } from "../runtime/transport/events.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import type { IdentityDeps } from "./deps.js";
import { bootstrapOrganization } from "./internal.js";
import { createLoginThrottle } from "./login-throttle.js";
import { dummyHash, setPasswordCost } from "./passwords.js";
import { migrations } from "./migrations.js";
import { createIdentityRoutes } from "./routes.js";
import { storeRecordedAudit } from "./store.js";

/**
 * The identity service module: organizations, members, sessions, API keys, ingest tokens and
 * receiver secrets, and the audit log other services write to.
 */
export function createIdentityService(ctx: ServiceContext): ServiceModule {
  const { sql, config, clients, outbox, broadcast } = ctx;
  const deps: IdentityDeps = { sql, config, clients, outbox, broadcast, throttle: createLoginThrottle(sql) };
  setPasswordCost(config.PASSWORD_SCRYPT_N);

  return {
    name: "identity",
    migrations,
    services: [IdentityService],
    register(router: ConnectRouter) {
      router.service(IdentityService, createIdentityRoutes(deps));
    },
    async start() {
      // Made now, in the background, so that the first login for an unknown email takes no longer
      // than any other; a failure leaves it to that login.
      dummyHash().catch(() => {});
      if (config.BOOTSTRAP_ORG_SLUG && config.BOOTSTRAP_OWNER_EMAIL && config.BOOTSTRAP_OWNER_PASSWORD) {
        const org = await bootstrapOrganization(sql, config.BOOTSTRAP_ORG_SLUG, config.BOOTSTRAP_OWNER_EMAIL, config.BOOTSTRAP_OWNER_PASSWORD);
        ctx.logger.info({ org: org.slug, created: org.created }, "bootstrap organization");
      }
      // Audit records other services write to their outboxes, stored once each. On the request
      // pool, not the background one: in one process this runs inside the relay's publish, which
      // holds a background connection meanwhile (see ServiceContext).
      await onEvent(ctx.events, EVENTS.auditRecorded, (record, event) => storeRecordedAudit(sql, record, event.id), { durableName: "identity-audit" });
    },
  };
}
