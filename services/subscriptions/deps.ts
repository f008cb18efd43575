import type { EgressClient } from "../runtime/egress/index.js";
import type { SecretBox } from "../runtime/credentials/secret-box.js";
import type { ServiceContext } from "../runtime/service-module.js";
import type { Config } from "../runtime/config/config.js";

/** What the subscription handlers, the fan-out and the delivery worker share. */
export interface SubscriptionsDeps extends Pick<ServiceContext, "sql" | "clients" | "outbox" | "logger" | "broadcast"> {
  config: Pick<
    Config,
    "publicUrl" | "SUBSCRIPTION_TIMEOUT_SECONDS" | "SUBSCRIPTION_RETRY_SCHEDULE_SECONDS" | "SUBSCRIPTION_DISABLE_AFTER_SECONDS" | "SUBSCRIPTION_CONCURRENCY"
  >;
  /** Every delivery goes through it: https only, vetted and pinned addresses, no redirects. */
  egress: EgressClient;
  /** Signing secrets at rest, created on first use. */
  secretBox(): SecretBox;
  /** Asks the delivery worker to look for due deliveries now (after a fan-out or a redelivery). */
  pokeWorker(): void;
}

/**
 * The organization's egress switch, from the comms service: undefined when it does not answer,
 * logged with what the caller does then (`meanwhile`).
 */
export async function readEgress(
  deps: Pick<SubscriptionsDeps, "clients" | "logger">,
  orgId: string,
  meanwhile = "subscriptions are shown without it",
): Promise<boolean | undefined> {
  try {
    return (await deps.clients.comms.egressEnabled({ orgId })).enabled;
  } catch (err) {
    deps.logger.warn({ err: String(err), org: orgId }, `cannot read the egress switch; ${meanwhile}`);
    return undefined;
  }
}

export const AUDIT_KINDS = {
  created: "subscriptions.subscription.created",
  updated: "subscriptions.subscription.updated",
  deleted: "subscriptions.subscription.deleted",
  secretRotated: "subscriptions.subscription.secret_rotated",
  tested: "subscriptions.subscription.tested",
  disabled: "subscriptions.subscription.disabled",
} as const;

/** How long a rotated-out secret keeps signing beside the new one. */
export const DUAL_SIGNING_MS = 24 * 3600 * 1000;
