import { stableDigest } from "./retry-recognition.js";
import type { MappedDelivery } from "./sources/index.js";

/**
 * The retry key of a delivery: what a sender's retry of it has in common with the first post and
 * a different delivery does not. Built from identifiers each sender already provides:
 *
 * - any route, any source: the `Idempotency-Key` header when the sender sets one;
 * - error-tracker: the event id with the request id header (`Request-ID`), so a retried post is
 *   recognized while a second alert rule firing on the same event is still its own delivery;
 * - alert-router (Alertmanager) firing notifications: the group key, the status, and each alert's
 *   fingerprint with its `startsAt`, which a retried post repeats and a new firing changes;
 * - chat: a digest of the body that does not depend on key order.
 *
 * The other sources carry an event identifier the incident core holds (a metrics-monitor
 * `event_id`, a cloud-monitor state change, a log-analytics window, a remote `dedupKey` with its
 * time; an alert-router resolved notification has its digest): the core never records one twice
 * and answers a redelivery as the spec's rows say (attached, or ignored for a recovery). They get
 * the first answer word for word with an `Idempotency-Key`, and a delivery of theirs without an
 * event identifier is recognized only through that header.
 *
 * Keys are digests, so a long header or a large body costs the table nothing.
 */
export const IDEMPOTENCY_KEY_HEADER = "idempotency-key";
export const ERROR_TRACKER_REQUEST_ID_HEADER = "request-id";

/** `pagerduty` and `opsgenie` (the drop-in receivers) are recognized by `Idempotency-Key` only. */
export type TriggerRoute = "shared" | "alertrouter" | "chat" | "pagerduty" | "opsgenie";

/**
 * The retry key of a delivery: from its `Idempotency-Key` header, else the error tracker's event
 * id, the alert-router group or the chat body; undefined when the incident core's event id already
 * makes a retry harmless.
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
  if (route === "chat") return stableDigest(["chat", body]);
  if (route === "alertrouter" && !mapped.alert?.eventId) {
    const notification = body as { groupKey?: unknown; status?: unknown; alerts?: unknown };
    const alerts = Array.isArray(notification.alerts) ? notification.alerts : [];
    const starts = alerts
      .map((alert: unknown) => {
        const a = (alert ?? {}) as { fingerprint?: unknown; startsAt?: unknown; labels?: unknown };
        return `${typeof a.fingerprint === "string" ? a.fingerprint : stableDigest(a.labels ?? null)}@${typeof a.startsAt === "string" ? a.startsAt : ""}`;
      })
      .sort();
    return stableDigest(["alert-router", String(notification.groupKey ?? ""), String(notification.status ?? ""), starts]);
  }
  return undefined;
}
