import { randomBytes } from "node:crypto";
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
/** Random bytes drawn 256 ids at a time: a call per id cost a storm's fan-out more than its statements. */
let idPool = Buffer.alloc(0);
let idOffset = 0;

/** A webhook-id: `msg_` and 15 random bytes in base64url (20 characters); unique per event and subscription. */
export function newWebhookId(): string {
  if (idOffset + WEBHOOK_ID_BYTES > idPool.length) {
    idPool = randomBytes(WEBHOOK_ID_BYTES * 256);
    idOffset = 0;
  }
  const bytes = idPool.subarray(idOffset, idOffset + WEBHOOK_ID_BYTES);
  idOffset += WEBHOOK_ID_BYTES;
  return `msg_${bytes.toString("base64url")}`;
}
