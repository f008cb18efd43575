import { readFileSync } from "node:fs";
import { type Config, ConfigError } from "../config/config.js";
import { createAddressPolicy } from "./address-policy.js";
import { createEgressClient, type EgressClient } from "./egress-client.js";

/**
 * The egress client for the service's own outbound posts (chat webhooks, event subscriptions):
 * https only, every resolved address vetted (EGRESS_ALLOW_PRIVATE_CIDRS names the non-public
 * ranges an operator allows), the connection pinned to the vetted address, no redirects followed,
 * time and answer size capped. With keepAliveMs, connections are kept between posts, each one
 * to its pinned address only (see EgressClientOptions.keepAliveMs). EGRESS_CA_FILE adds a trusted CA for an on-premises receiver.
 */
export function createOutboundHttpsEgress(
  config: Pick<Config, "EGRESS_CA_FILE" | "EGRESS_ALLOW_PRIVATE_CIDRS">,
  limits: { timeoutMs: number; maxResponseBytes: number; keepAliveMs?: number; maxSocketsPerPin?: number },
): EgressClient {
  let ca: Buffer | undefined;
  if (config.EGRESS_CA_FILE) {
    try {
      ca = readFileSync(config.EGRESS_CA_FILE);
    } catch (err) {
      throw new ConfigError(`invalid configuration:\n  EGRESS_CA_FILE: cannot read the file (${(err as NodeJS.ErrnoException).code ?? "error"})`);
    }
  }
  let policy: ReturnType<typeof createAddressPolicy>;
  try {
    policy = createAddressPolicy({
      allowPrivateCidrs: config.EGRESS_ALLOW_PRIVATE_CIDRS,
      requireHttps: true,
      settings: { allow: "EGRESS_ALLOW_PRIVATE_CIDRS" },
    });
  } catch (err) {
    throw new ConfigError(`invalid configuration:\n  EGRESS_ALLOW_PRIVATE_CIDRS: ${(err as Error).message}`);
  }
  return createEgressClient({ policy, ...limits, ...(ca ? { ca } : {}) });
}
