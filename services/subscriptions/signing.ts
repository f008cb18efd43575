import { createHash, randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";

/** A new signing secret in the Standard Webhooks form: `whsec_` and the base64 of 32 random bytes. */
export function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}

/** The Standard Webhooks headers of one delivery. */
export interface SignedHeaders {
  "webhook-id": string;
  "webhook-timestamp": string;
  "webhook-signature": string;
}

/**
 * Signs `body` for `webhookId` at `at` with every secret given (the current one first): the
 * signature header lists one `v1,<base64>` per secret, space-separated, so a receiver that still
 * holds the previous secret keeps verifying during a rotation.
 */
export function signDelivery(secrets: readonly string[], webhookId: string, at: Date, body: string): SignedHeaders {
  const signatures = secrets.map((secret) => new Webhook(secret).sign(webhookId, at, body));
  return {
    "webhook-id": webhookId,
    "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
    "webhook-signature": signatures.join(" "),
  };
}

const WEBHOOK_ID_BYTES = 15;

/**
 * The webhook-id of an event's delivery to a subscription: `msg_` and the first 15 bytes of a
 * SHA-256 of the two, in base64url (20 characters). The same event reaching the fan-out twice
 * gets the same id (the primary key then keeps one row), on every attempt and redelivery.
 */
export function webhookIdFor(subscriptionId: string, eventId: string): string {
  return `msg_${createHash("sha256").update(`${subscriptionId}:${eventId}`).digest().subarray(0, WEBHOOK_ID_BYTES).toString("base64url")}`;
}
