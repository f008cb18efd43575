import type { Config } from "../runtime/config/config.js";
import { isEgressError, type EgressClient } from "../runtime/egress/index.js";
import { createOutboundHttpsEgress } from "../runtime/egress/outbound-https.js";
import { parseRetryAfter } from "./retry-schedule.js";
import { signDelivery } from "./signing.js";

/** The delivery log keeps this much of a receiver's answer, and nothing more is read. */
export const RESPONSE_LOG_BYTES = 1024;

/** Idle kept connections to a receiver close after this: below the 5 s most servers keep them. */
export const KEEP_ALIVE_MS = 4_000;
/** Deliveries in flight per process, over every subscription. */
export const MAX_IN_FLIGHT = 64;

/**
 * The egress client every delivery goes through (see createOutboundHttpsEgress). A receiver's
 * connections are kept between deliveries (a TLS handshake per post cost more than the post), as
 * many to one pinned address as the worker ever has in flight, so no delivery waits for another's
 * connection.
 */
export function createSubscriptionEgress(config: Pick<Config, "EGRESS_CA_FILE" | "EGRESS_ALLOW_PRIVATE_CIDRS" | "SUBSCRIPTION_TIMEOUT_SECONDS">): EgressClient {
  return createOutboundHttpsEgress(config, {
    timeoutMs: Math.round(config.SUBSCRIPTION_TIMEOUT_SECONDS * 1000),
    maxResponseBytes: RESPONSE_LOG_BYTES,
    keepAliveMs: KEEP_ALIVE_MS,
    maxSocketsPerPin: MAX_IN_FLIGHT,
  });
}

/** What one attempt came to. */
export interface AttemptResult {
  ok: boolean;
  /** The receiver's HTTP status; 0 when none came. */
  status: number;
  latencyMs: number;
  /** The first 1 KiB of the answer. */
  response: string;
  error?: string;
  /** From a Retry-After header, when the receiver sent one. */
  retryAfterMs?: number;
}

/** Posts one signed delivery. Never throws: every failure is an attempt result. */
export async function postSigned(egress: EgressClient, url: string, secrets: readonly string[], webhookId: string, body: string): Promise<AttemptResult> {
  const started = performance.now();
  const latency = () => Math.round(performance.now() - started);
  try {
    const headers = signDelivery(secrets, webhookId, new Date(), body);
    const answer = await egress.request({
      url,
      method: "POST",
      headers: { "content-type": "application/json", "user-agent": "warroom-webhooks/1", ...headers },
      body,
    });
    const ok = answer.status >= 200 && answer.status < 300;
    const retryAfterMs = parseRetryAfter(answer.headers["retry-after"]);
    return {
      ok,
      status: answer.status,
      latencyMs: latency(),
      response: answer.body.subarray(0, RESPONSE_LOG_BYTES).toString("utf8"),
      ...(ok ? {} : { error: `receiver answered HTTP ${answer.status}` }),
      ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
    };
  } catch (err) {
    // Egress errors never quote the URL; anything else is reported by kind only.
    const error = isEgressError(err) ? err.message : `delivery failed (${(err as Error).name})`;
    return { ok: false, status: 0, latencyMs: latency(), response: "", error };
  }
}
