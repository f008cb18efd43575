import { randomUUID } from "node:crypto";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { SubscriptionsService } from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { isEgressError, type EgressError } from "../runtime/egress/index.js";
import { InvalidArgumentError } from "../runtime/errors.js";
import { recordAudit } from "../runtime/transport/events.js";
import { AUDIT_KINDS, DUAL_SIGNING_MS, readEgress, type SubscriptionsDeps } from "./deps.js";
import { SUBSCRIPTION_CREATED } from "../runtime/transport/broadcast.js";
import { EVENT_TYPES, isEventType } from "./event-types.js";
import { newSigningSecret } from "./signing.js";
import { loadSubscription, secretAssociatedData, toSubscription, type SubscriptionRow } from "./store.js";

const MAX_URL_LENGTH = 2048;
const MAX_DESCRIPTION_LENGTH = 500;
/** Enough for one of each type several times over; more is a mistake, not a need. */
const MAX_SUBSCRIPTIONS_PER_ORG = 50;

/** Why a URL cannot be subscribed, in words for the admin who typed it. */
function describeUrlRefusal(err: EgressError): string {
  switch (err.reason) {
    case "invalid_url":
      return "url is not a valid absolute URL";
    case "forbidden_scheme":
      return "url must be an https URL: plain http and other schemes are refused";
    case "forbidden_userinfo":
      return "url must not contain a user name or password";
    case "forbidden_address":
      return "url refused: its host is not a public address (an operator may allow a private range with EGRESS_ALLOW_PRIVATE_CIDRS)";
    case "resolution_failed":
      return `url refused: its host name does not resolve${err.code ? ` (${err.code})` : ""}`;
    default:
      return "url refused: it cannot be checked";
  }
}

/** The URL, checked as a delivery would check it: https, every address it resolves to allowed. */
async function validateUrl(deps: SubscriptionsDeps, value: string): Promise<string> {
  const url = value.trim();
  if (!url) throw new InvalidArgumentError("url required");
  if (url.length > MAX_URL_LENGTH) throw new InvalidArgumentError(`url must be at most ${MAX_URL_LENGTH} characters`);
  try {
    await deps.egress.vet(url);
  } catch (err) {
    if (isEgressError(err)) throw new InvalidArgumentError(describeUrlRefusal(err));
    throw err;
  }
  return url;
}

function validateEvents(events: readonly string[]): string[] {
  if (events.length === 0) throw new InvalidArgumentError(`events required: one or more of ${EVENT_TYPES.join(", ")}`);
  const unknown = events.filter((e) => !isEventType(e));
  if (unknown.length > 0) throw new InvalidArgumentError(`unknown event type ${JSON.stringify(unknown[0])}: use ${EVENT_TYPES.join(", ")}`);
  return [...new Set(events)];
}

function validateDescription(value: string): string {
  const description = value.trim();
  if (description.length > MAX_DESCRIPTION_LENGTH) throw new InvalidArgumentError(`description must be at most ${MAX_DESCRIPTION_LENGTH} characters`);
  return description;
}

/** Create, list, get, update, delete and rotate the secret of an organization's subscriptions. */
export function createSubscriptionHandlers(
  deps: SubscriptionsDeps,
): Pick<
  ServiceImpl<typeof SubscriptionsService>,
  "createSubscription" | "listSubscriptions" | "getSubscription" | "updateSubscription" | "deleteSubscription" | "rotateSubscriptionSecret"
> {
  const { sql, clients, outbox } = deps;
  const egressOf = (orgId: string) => readEgress(deps, orgId);
  return {
    async createSubscription(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const url = await validateUrl(deps, req.url);
      const events = validateEvents(req.events);
      const description = validateDescription(req.description);
      const id = randomUUID();
      const secret = newSigningSecret();
      const sealed = deps.secretBox().seal(secret, secretAssociatedData(principal.orgId, id));
      const row = await sql.begin(async (tx) => {
        // Serializes creations per organization so the cap holds with concurrent calls.
        await tx`select pg_advisory_xact_lock(hashtext('subscriptions:' || ${principal.orgId}))`;
        const [{ count } = { count: 0 }] = await tx<{ count: number }[]>`
          select count(*)::int as count from subscriptions.subscriptions where org_id = ${principal.orgId}`;
        if (count >= MAX_SUBSCRIPTIONS_PER_ORG) {
          throw new InvalidArgumentError(`an organization has at most ${MAX_SUBSCRIPTIONS_PER_ORG} subscriptions; delete one first`);
        }
        const [inserted] = await tx<SubscriptionRow[]>`
          insert into subscriptions.subscriptions (id, org_id, org_slug, url, events, description, key_id, secret_ciphertext, created_by)
          values (${id}, ${principal.orgId}, ${principal.orgSlug}, ${url}, ${events}, ${description}, ${sealed.keyId}, ${sealed.ciphertext}, ${principal.email})
          returning *`;
        await recordAudit(outbox, tx, { orgId: principal.orgId, kind: AUDIT_KINDS.created, actor: principal.email, data: { id, events } });
        return inserted!;
      });
      // Before answering: an event after this answer must not meet a fan-out that still believes
      // the organization subscribes to nothing (fan-out.ts).
      await deps.broadcast.publish(SUBSCRIPTION_CREATED, principal.orgId);
      outbox.poke();
      return { id, secret, subscription: toSubscription(row, { egressEnabled: await egressOf(principal.orgId) }) };
    },

    async listSubscriptions(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const rows = await sql<SubscriptionRow[]>`
        select * from subscriptions.subscriptions where org_id = ${principal.orgId} order by created_at, id`;
      const fullUrl = ADMINS.includes(principal.role as (typeof ADMINS)[number]);
      const egressEnabled = await egressOf(principal.orgId);
      return { subscriptions: rows.map((row) => toSubscription(row, { fullUrl, egressEnabled })) };
    },

    async getSubscription(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const fullUrl = ADMINS.includes(principal.role as (typeof ADMINS)[number]);
      return toSubscription(await loadSubscription(sql, principal.orgId, req.id), { fullUrl, egressEnabled: await egressOf(principal.orgId) });
    },

    async updateSubscription(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      await loadSubscription(sql, principal.orgId, req.id);
      const url = req.url === undefined ? undefined : await validateUrl(deps, req.url);
      const events = req.events.length > 0 ? validateEvents(req.events) : undefined;
      const description = req.description === undefined ? undefined : validateDescription(req.description);
      const row = await sql.begin(async (tx) => {
        const [updated] = await tx<SubscriptionRow[]>`
          update subscriptions.subscriptions set
            url = coalesce(${url ?? null}::text, url),
            events = coalesce(${events ?? null}::text[], events),
            description = coalesce(${description ?? null}::text, description),
            state = case when ${req.enabled ?? null}::boolean is null then state when ${req.enabled ?? false} then 'enabled' else 'disabled' end,
            disabled_reason = case when ${req.enabled ?? null}::boolean is null then disabled_reason when ${req.enabled ?? false} then null else 'disabled by ' || ${principal.email} end,
            disabled_at = case when ${req.enabled ?? null}::boolean is null then disabled_at when ${req.enabled ?? false} then null else now() end,
            -- Enabled again: the failure clock starts over.
            failing_since = case when ${req.enabled ?? false} then null else failing_since end,
            updated_at = now()
          where id = ${req.id} and org_id = ${principal.orgId}
          returning *`;
        if (!updated) return undefined;
        await recordAudit(outbox, tx, {
          orgId: principal.orgId,
          kind: AUDIT_KINDS.updated,
          actor: principal.email,
          data: {
            id: req.id,
            ...(url !== undefined ? { urlChanged: true } : {}),
            ...(events ? { events } : {}),
            ...(req.enabled !== undefined ? { enabled: req.enabled } : {}),
          },
        });
        return updated;
      });
      const egressEnabled = await egressOf(principal.orgId);
      if (!row) return toSubscription(await loadSubscription(sql, principal.orgId, req.id), { egressEnabled });
      outbox.poke();
      if (req.enabled) deps.pokeWorker();
      return toSubscription(row, { egressEnabled });
    },

    async deleteSubscription(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      await loadSubscription(sql, principal.orgId, req.id);
      await sql.begin(async (tx) => {
        // Its deliveries go with it (their attempts cascade): pending retries stop here. The
        // subscription first, which waits for a fan-out holding it (fan-out.ts), so the deliveries
        // that fan-out queued are deleted too.
        const deleted = await tx`delete from subscriptions.subscriptions where id = ${req.id} and org_id = ${principal.orgId}`;
        if (deleted.count > 0) {
          await tx`delete from subscriptions.deliveries where subscription_id = ${req.id}`;
          await recordAudit(outbox, tx, { orgId: principal.orgId, kind: AUDIT_KINDS.deleted, actor: principal.email, data: { id: req.id } });
        }
      });
      outbox.poke();
      return {};
    },

    async rotateSubscriptionSecret(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const current = await loadSubscription(sql, principal.orgId, req.id);
      const secret = newSigningSecret();
      const sealed = deps.secretBox().seal(secret, secretAssociatedData(principal.orgId, current.id));
      const row = await sql.begin(async (tx) => {
        // The previous secret is the one that signed until now (read under the row lock, so two
        // rotations at once each keep the secret the other replaced, never a lost one).
        const [updated] = await tx<SubscriptionRow[]>`
          update subscriptions.subscriptions set
            previous_key_id = key_id,
            previous_secret_ciphertext = secret_ciphertext,
            previous_expires_at = now() + ${`${DUAL_SIGNING_MS} milliseconds`}::interval,
            key_id = ${sealed.keyId},
            secret_ciphertext = ${sealed.ciphertext},
            updated_at = now()
          where id = ${current.id} and org_id = ${principal.orgId}
          returning *`;
        if (updated) {
          await recordAudit(outbox, tx, { orgId: principal.orgId, kind: AUDIT_KINDS.secretRotated, actor: principal.email, data: { id: current.id } });
        }
        return updated;
      });
      if (!row) await loadSubscription(sql, principal.orgId, req.id);
      outbox.poke();
      return { secret, previousSecretExpiresAt: timestampFromDate(row!.previous_expires_at!) };
    },
  };
}
