import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { SubscriptionSchema, type Subscription } from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";
import type { Sql } from "../runtime/data/database.js";
import { NotFoundError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import type { SecretBox } from "../runtime/credentials/secret-box.js";

/** A row of subscriptions.subscriptions. */
export interface SubscriptionRow {
  id: string;
  org_id: string;
  org_slug: string;
  url: string;
  events: string[];
  description: string;
  state: "enabled" | "disabled";
  disabled_reason: string | null;
  disabled_at: Date | null;
  key_id: string;
  secret_ciphertext: Buffer;
  previous_key_id: string | null;
  previous_secret_ciphertext: Buffer | null;
  previous_expires_at: Date | null;
  failing_since: Date | null;
  created_by: string;
  created_at: Date;
}

/** A row of subscriptions.deliveries. */
export interface DeliveryRow {
  id: string;
  subscription_id: string;
  org_id: string;
  event_id: string;
  event_type: string;
  payload: string;
  state: "pending" | "delivering" | "delivered" | "simulated" | "failed" | "cancelled";
  attempt_count: number;
  /** Attempts made before the last redelivery a person asked for: the retry schedule counts from there. */
  attempts_before_window: number;
  window_start: Date;
  next_attempt_at: Date | null;
  created_at: Date;
}

export interface AttemptRow {
  delivery_id: string;
  at: Date;
  status: number;
  latency_ms: number;
  response: string;
  error: string | null;
  outcome: string;
}

/** What a secret is sealed with: it is bound to its subscription, so a ciphertext cannot be moved. */
export const secretAssociatedData = (orgId: string, subscriptionId: string) => `subscription-secret:${orgId}:${subscriptionId}`;

/** The secrets that sign now: the current one, and the previous one until it expires. */
export function signingSecrets(box: SecretBox, row: SubscriptionRow, now = new Date()): string[] {
  const ad = secretAssociatedData(row.org_id, row.id);
  const secrets = [box.open({ keyId: row.key_id, ciphertext: row.secret_ciphertext }, ad)];
  if (row.previous_key_id && row.previous_secret_ciphertext && row.previous_expires_at && row.previous_expires_at > now) {
    secrets.push(box.open({ keyId: row.previous_key_id, ciphertext: row.previous_secret_ciphertext }, ad));
  }
  return secrets;
}

/**
 * A URL as a member (not an admin) sees it: without its query and user part, where receivers
 * sometimes carry a token of their own.
 */
export function urlForMembers(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}${parsed.search ? "?…" : ""}`;
  } catch {
    return "";
  }
}

/**
 * What the API says of the organization's egress switch beside a subscription or a test: real
 * events are recorded as simulated, never sent, while it is off. Nothing when it could not be read.
 */
export function egressFields(enabled: boolean | undefined, orgSlug: string, sending: "subscription" | "test"): { egressEnabled?: boolean; notice?: string } {
  if (enabled === undefined) return {};
  if (enabled) return { egressEnabled: true };
  const turnOn = `turn it on with PUT /o/${orgSlug}/oncall/egress {"enabled": true} (in the console: Integrations, Real egress)`;
  const notice =
    sending === "test"
      ? `This test event was sent, but real events are not: the organization's real egress is off, so each is recorded as simulated; ${turnOn}.`
      : `Real egress is off for this organization: events are recorded as simulated and not sent to this URL; ${turnOn}.`;
  return { egressEnabled: false, notice };
}

/** The subscription as the API shows it: never a secret; for members, the URL without its query. */
export function toSubscription(row: SubscriptionRow, options: { fullUrl?: boolean; egressEnabled?: boolean | undefined } = {}, now = new Date()): Subscription {
  return create(SubscriptionSchema, {
    ...egressFields(options.egressEnabled, row.org_slug, "subscription"),
    id: row.id,
    url: options.fullUrl === false ? urlForMembers(row.url) : row.url,
    events: row.events,
    description: row.description,
    state: row.state,
    ...(row.disabled_reason ? { disabledReason: row.disabled_reason } : {}),
    ...(row.disabled_at ? { disabledAt: timestampFromDate(row.disabled_at) } : {}),
    createdAt: timestampFromDate(row.created_at),
    ...(row.failing_since ? { failingSince: timestampFromDate(row.failing_since) } : {}),
    ...(row.previous_expires_at && row.previous_expires_at > now ? { previousSecretExpiresAt: timestampFromDate(row.previous_expires_at) } : {}),
  });
}

/** The organization's subscription `id`, or 404 (an id of another organization is not found either). */
export async function loadSubscription(sql: Sql, orgId: string, id: string): Promise<SubscriptionRow> {
  if (!isUuid(id)) throw new NotFoundError(`no subscription ${JSON.stringify(id)} in this organization`);
  const [row] = await sql<SubscriptionRow[]>`select * from subscriptions.subscriptions where id = ${id} and org_id = ${orgId}`;
  if (!row) throw new NotFoundError(`no subscription ${JSON.stringify(id)} in this organization`);
  return row;
}
