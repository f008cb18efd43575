import type { Config } from "../runtime/config/config.js";
import { isEgressError, type EgressClient, type EgressError } from "../runtime/egress/index.js";
import { createOutboundHttpsEgress } from "../runtime/egress/outbound-https.js";
import { chatWebhookDuration, chatWebhookRequests } from "../runtime/observability/metrics.js";
import { injectHeaders, inSpan, SpanKind, SpanStatusCode, tracingEnabled } from "../runtime/observability/tracing.js";
import type { ChatWebhookPayload } from "./adaptive-card.js";

/** What the chat webhook's answer could be read as; kept small, only the status and a hint are used. */
const MAX_RESPONSE_BYTES = 16 * 1024;

export type DeliveryOutcome = { ok: true; status: number } | { ok: false; error: string };

/** The egress client every chat-webhook call goes through (see createOutboundHttpsEgress). */
/** Every result chatWebhookRequests counts (postCardOnce, failureResult). */
const CHAT_WEBHOOK_RESULTS = ["ok", "http_error", "timeout", "tls", "network", "refused", "error"];

export function createChatWebhookEgress(config: Config): EgressClient {
  // Every result at 0 from the start: the alert rule's rate() sees the first failure.
  for (const result of CHAT_WEBHOOK_RESULTS) chatWebhookRequests.inc({ result }, 0);
  return createOutboundHttpsEgress(config, { timeoutMs: Math.round(config.CHAT_WEBHOOK_TIMEOUT_SECONDS * 1000), maxResponseBytes: MAX_RESPONSE_BYTES });
}

/**
 * The address part of a refusal ("127.0.0.1, a loopback address"), without the host name: the
 * URL is a credential, so no part of it is repeated beyond the address it leads to.
 */
function refusedAddress(err: EgressError): string | undefined {
  const match = /(?:resolves to|outbound address) (.+?)(?:; to allow it, .*)?$/.exec(err.message);
  return match?.[1];
}

/** Why a URL cannot be saved, in words for the admin who typed it; never repeats the URL. */
export function describeSaveRefusal(err: EgressError): string {
  switch (err.reason) {
    case "invalid_url":
      return "webhookUrl is not a valid absolute URL";
    case "forbidden_scheme":
      return "webhookUrl must be an https URL: plain http and other schemes are refused";
    case "forbidden_userinfo":
      return "webhookUrl must not contain a user name or password";
    case "forbidden_address": {
      const address = refusedAddress(err);
      return `webhookUrl refused: its host ${address ? `leads to ${address}` : "is not a public address"}; only public addresses are allowed (an operator may allow a private range with EGRESS_ALLOW_PRIVATE_CIDRS)`;
    }
    case "resolution_failed":
      return `webhookUrl refused: its host name does not resolve${err.code ? ` (${err.code})` : ""}`;
    default:
      return "webhookUrl refused: it cannot be checked";
  }
}

/** A failed call, in words for the send answer and the timeline; never repeats the URL or host. */
export function describeDeliveryFailure(err: EgressError, timeoutSeconds: number): string {
  const code = err.code ? ` (${err.code})` : "";
  switch (err.reason) {
    case "timeout":
      return `Chat webhook did not answer within ${timeoutSeconds} s`;
    case "tls":
      return `Chat webhook TLS handshake failed${code}`;
    case "network":
      return err.code === "ECONNREFUSED"
        ? "Chat webhook unreachable: connection refused (ECONNREFUSED)"
        : `Chat webhook unreachable: the connection failed${code}`;
    case "resolution_failed":
      return `Chat webhook unreachable: its host name does not resolve${code}`;
    case "forbidden_address": {
      const address = refusedAddress(err);
      return `Chat webhook refused by the egress policy: ${address ? `it leads to ${address}` : "its address is not public"}`;
    }
    case "forbidden_scheme":
    case "forbidden_userinfo":
    case "invalid_url":
      return "Chat webhook refused by the egress policy: the saved URL is no longer accepted; save it again";
    default:
      return `Chat webhook call failed${code}`;
  }
}

/**
 * Posts one card. A 2xx is delivery (a Workflows webhook answers 202). A legacy connector answers
 * 200 and reports throttling in its body, which is read as the status it names.
 */
export async function postCard(egress: EgressClient, webhookUrl: string, payload: ChatWebhookPayload, timeoutSeconds: number): Promise<DeliveryOutcome> {
  const started = performance.now();
  let result = "error";
  try {
    if (!tracingEnabled()) return await postCardOnce(egress, webhookUrl, payload, timeoutSeconds, (r) => (result = r));
    // The webhook URL is a credential: the span names the kind of call, never where it went.
    return await inSpan("POST chat-webhook", { kind: SpanKind.CLIENT, attributes: { "http.request.method": "POST" } }, async (span) => {
      const outcome = await postCardOnce(egress, webhookUrl, payload, timeoutSeconds, (r) => (result = r));
      span?.setAttribute("warroom.result", result);
      if (outcome.ok) span?.setAttribute("http.response.status_code", outcome.status);
      else span?.setStatus({ code: SpanStatusCode.ERROR });
      return outcome;
    });
  } finally {
    chatWebhookRequests.inc({ result });
    chatWebhookDuration.observe((performance.now() - started) / 1000);
  }
}

/** The metric's result for a refusal by the egress client. */
function failureResult(err: EgressError): string {
  switch (err.reason) {
    case "timeout":
    case "tls":
    case "network":
      return err.reason;
    case "resolution_failed":
      return "network";
    case "forbidden_address":
    case "forbidden_scheme":
    case "forbidden_userinfo":
    case "invalid_url":
      return "refused";
    default:
      return "error";
  }
}

async function postCardOnce(
  egress: EgressClient,
  webhookUrl: string,
  payload: ChatWebhookPayload,
  timeoutSeconds: number,
  outcome: (result: string) => void,
): Promise<DeliveryOutcome> {
  let response: Awaited<ReturnType<EgressClient["request"]>>;
  try {
    response = await egress.request({
      url: webhookUrl,
      method: "POST",
      headers: injectHeaders({ "content-type": "application/json", "user-agent": "warroom-comms" }),
      body: JSON.stringify(payload),
    });
  } catch (err) {
    if (isEgressError(err)) {
      outcome(failureResult(err));
      return { ok: false, error: describeDeliveryFailure(err, timeoutSeconds) };
    }
    throw err;
  }
  outcome("http_error");
  if (response.status < 200 || response.status > 299) return { ok: false, error: `Chat webhook HTTP ${response.status}` };
  const legacy = /returned HTTP error (\d{3})/.exec(response.body.subarray(0, 2048).toString("utf8"));
  if (legacy) return { ok: false, error: `Chat webhook HTTP ${legacy[1]}` };
  outcome("ok");
  return { ok: true, status: response.status };
}
