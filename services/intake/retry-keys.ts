import { OffloadedBody } from "./custom-sources/large-bodies.js";
import { stableDigest } from "./retry-recognition.js";
import type { MappedDelivery } from "./sources/index.js";

/**
 * The retry key of a delivery: what a sender's retry of it has in common with the first post and
 * a different delivery does not. Only where a sender names the delivery:
 *
 * - any route, any source: the `Idempotency-Key` header when the sender sets one;
 * - error-tracker: the event id with the request id header (`Request-ID`), so a retried post is
 *   recognized while a second alert rule firing on the same event is still its own delivery. Its
 *   deliveries have no attach identity (each opens its own incident), so this is the only thing
 *   that keeps a retry from opening a second one.
 *
 * Every other delivery goes to the incident core as it is, and the spec's rows decide it there.
 * A chat message or an alert-router notification delivered again attaches to its open incident
 * and records a repeat ("a retry is safe because the message id attaches it"; "alert-router
 * delivery with same group key → outcome attached; repeat recorded"), alone or concurrent: a
 * content hash here would swallow the repeat the spec wants recorded. So does a PagerDuty or
 * Opsgenie trigger with the same `dedup_key` or `alias`. A source's own event identifier (a
 * metrics-monitor `event_id`, a cloud-monitor state change, a log-analytics window, a remote
 * `dedupKey` with its time, an alert-router resolved notification's digest) is held by the core,
 * which never records one twice. The rule per source is in docs/ARCHITECTURE.md.
 *
 * Keys are digests, so a long header or a large body costs the table nothing.
 */
export const IDEMPOTENCY_KEY_HEADER = "idempotency-key";
export const ERROR_TRACKER_REQUEST_ID_HEADER = "request-id";

/**
 * The route a delivery came in on; an `Idempotency-Key` is scoped to it. Each custom source is a
 * route of its own, so one key used on two sources names two deliveries.
 */
export type TriggerRoute = "shared" | "alertrouter" | "chat" | "pagerduty" | "opsgenie" | `custom:${string}`;

/**
 * The retry key of a delivery: from its `Idempotency-Key` header, else the error tracker's event
 * id with its request id; undefined otherwise (the incident core decides a redelivery).
 */
export function retryKeyOf(route: TriggerRoute, body: unknown, mapped: MappedDelivery, header: Headers): string | undefined {
  const idempotencyKey = header.get(IDEMPOTENCY_KEY_HEADER)?.trim();
  if (idempotencyKey) return stableDigest(["idempotency-key", route, idempotencyKey]);
  const source = mapped.alert?.source;
  if (source === "error-tracker" && mapped.alert?.eventId) {
    // The issue-alert webhook and the older per-project plugin may both carry one event.
    const integration = body !== null && typeof body === "object" && Object.hasOwn(body, "project_slug") ? "plugin" : "issue-alert";
    return stableDigest(["error-tracker", integration, mapped.alert.eventId, header.get(ERROR_TRACKER_REQUEST_ID_HEADER) ?? ""]);
  }
  return undefined;
}

/**
 * The digest of the body a sender named with an `Idempotency-Key`, kept with the key: the same key
 * with another body is refused (422), as the IETF Idempotency-Key draft has it. Undefined without
 * the header: the other retry keys are derived from the body itself.
 */
export function bodyDigestOf(body: unknown, header: Headers): string | undefined {
  if (!header.get(IDEMPOTENCY_KEY_HEADER)?.trim()) return undefined;
  // A large body is digested where it was parsed, on a worker thread, the same way.
  return body instanceof OffloadedBody ? body.bodyDigest : stableDigest(["body", body]);
}

/** The longest part of a sender's `Idempotency-Key` an answer repeats. */
const KEY_SHOWN_CHARS = 200;

/** The refusal of an `Idempotency-Key` reused with another body, naming the key and what to do. */
export function reusedKeyMessage(header: Headers): string {
  const key = header.get(IDEMPOTENCY_KEY_HEADER)?.trim() ?? "";
  const shown = key.length > KEY_SHOWN_CHARS ? `${key.slice(0, KEY_SHOWN_CHARS)}…` : key;
  return `Idempotency-Key ${JSON.stringify(shown)} was already used with a different body; send this alert with a new Idempotency-Key, or the same body to retry the first one`;
}
