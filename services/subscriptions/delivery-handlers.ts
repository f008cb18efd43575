import { randomUUID } from "node:crypto";
import { create, toJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { TestEventDataSchema, type SubscriptionsService } from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { FailedPreconditionError, InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { recordAudit } from "../runtime/transport/events.js";
import { decodeCursor, encodeCursor, pageLimit, pageOf } from "../runtime/data/page-cursor.js";
import { subscriptionAttemptDuration, subscriptionAttempts } from "../runtime/observability/metrics.js";
import { AUDIT_KINDS, readEgress, type SubscriptionsDeps } from "./deps.js";
import { envelope, TEST_EVENT_TYPE } from "./event-types.js";
import { postSigned } from "./send.js";
import { webhookIdFor } from "./signing.js";
import { egressFields, loadSubscription, signingSecrets, type AttemptRow, type DeliveryRow } from "./store.js";

/** Attempts shown per delivery in the log. */
const ATTEMPTS_SHOWN = 20;

/** Send a test event, read the delivery log, and queue deliveries again. */
export function createDeliveryHandlers(
  deps: SubscriptionsDeps,
): Pick<ServiceImpl<typeof SubscriptionsService>, "sendTestEvent" | "listDeliveries" | "redeliverMessage" | "redeliverSince"> {
  const { sql, clients, outbox } = deps;
  /**
   * A redelivery is due now with a fresh retry window and schedule: the attempts made so far stay
   * counted in the log, and the schedule counts from them (a spent one would allow no retry).
   */
  const redeliveryReset = () =>
    sql`state = 'pending', next_attempt_at = now(), window_start = now(), attempts_before_window = attempt_count, claim = null, claimed_until = null`;
  return {
    // Like the chat connection test, this posts even while real egress is off: an admin asked
    // for exactly this one post, now. It is logged as a delivery of its own.
    async sendTestEvent(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const sub = await loadSubscription(sql, principal.orgId, req.id);
      const eventId = `test:${randomUUID()}`;
      const webhookId = webhookIdFor(sub.id, eventId);
      const data = toJson(
        TestEventDataSchema,
        create(TestEventDataSchema, { org: principal.orgSlug, subscriptionId: sub.id, message: `Test event sent by ${principal.email}` }),
      );
      const body = envelope(TEST_EVENT_TYPE, new Date(), data);
      const result = await postSigned(deps.egress, sub.url, signingSecrets(deps.secretBox(), sub), webhookId, body);
      subscriptionAttempts.inc({ outcome: result.ok ? "delivered" : result.status === 410 ? "gone" : "failed" });
      subscriptionAttemptDuration.observe(result.latencyMs / 1000);
      await sql.begin(async (tx) => {
        // Logged unless the subscription was deleted meanwhile (its lock, as the fan-out's).
        const logged = await tx`
          insert into subscriptions.deliveries (id, subscription_id, org_id, event_id, event_type, payload, state, attempt_count, next_attempt_at)
          select ${webhookId}, id, org_id, ${eventId}, ${TEST_EVENT_TYPE}, ${body}, ${result.ok ? "delivered" : "failed"}, 1, null
          from subscriptions.subscriptions where id = ${sub.id} for key share`;
        if (logged.count > 0) {
          await tx`
            insert into subscriptions.attempts (delivery_id, status, latency_ms, response, error, outcome)
            values (${webhookId}, ${result.status}, ${result.latencyMs}, ${result.response}, ${result.error ?? null}, 'test')`;
        }
        await recordAudit(outbox, tx, {
          orgId: principal.orgId,
          kind: AUDIT_KINDS.tested,
          actor: principal.email,
          data: { id: sub.id, ok: result.ok, status: result.status, ...(result.error ? { error: result.error } : {}) },
        });
      });
      outbox.poke();
      return {
        ok: result.ok,
        status: result.status,
        webhookId,
        latencyMs: result.latencyMs,
        ...(result.error ? { error: result.error } : {}),
        ...egressFields(await readEgress(deps, principal.orgId), principal.orgSlug, "test"),
      };
    },

    async listDeliveries(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const sub = await loadSubscription(sql, principal.orgId, req.id);
      const limit = pageLimit(req.limit, 50, 200);
      const after = req.cursor ? decodeCursor("d", req.cursor, (v) => /^msg_[A-Za-z0-9_-]+$/.test(v)) : undefined;
      const afterClause =
        after === undefined
          ? sql``
          : sql`and (created_at, id) < (select created_at, id from subscriptions.deliveries where subscription_id = ${sub.id} and id = ${after})`;
      const rows = await sql<DeliveryRow[]>`
        select * from subscriptions.deliveries where subscription_id = ${sub.id} ${afterClause}
        order by created_at desc, id desc limit ${limit + 1}`;
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("d", last.id));
      const attempts =
        page.length === 0
          ? []
          : await sql<AttemptRow[]>`
              select a.* from unnest(${page.map((d) => d.id)}::text[]) as p(id)
              cross join lateral (
                select * from subscriptions.attempts where delivery_id = p.id order by id desc limit ${ATTEMPTS_SHOWN}
              ) a`;
      const byDelivery = new Map<string, AttemptRow[]>();
      for (const a of attempts) byDelivery.set(a.delivery_id, [...(byDelivery.get(a.delivery_id) ?? []), a]);
      return {
        deliveries: page.map((d) => ({
          webhookId: d.id,
          eventType: d.event_type,
          state: d.state,
          attemptCount: d.attempt_count,
          ...(d.next_attempt_at && (d.state === "pending" || d.state === "delivering") ? { nextAttemptAt: timestampFromDate(d.next_attempt_at) } : {}),
          createdAt: timestampFromDate(d.created_at),
          payload: JSON.parse(d.payload) as JsonObject,
          attempts: (byDelivery.get(d.id) ?? []).map((a) => ({
            at: timestampFromDate(a.at),
            status: a.status,
            latencyMs: a.latency_ms,
            response: a.response,
            outcome: a.outcome,
            ...(a.error ? { error: a.error } : {}),
          })),
        })),
        ...(nextCursor ? { nextCursor } : {}),
      };
    },

    async redeliverMessage(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const sub = await loadSubscription(sql, principal.orgId, req.id);
      const queued = await sql`
        update subscriptions.deliveries set ${redeliveryReset()}
        where subscription_id = ${sub.id} and id = ${req.webhookId} and event_type <> ${TEST_EVENT_TYPE}`;
      if (queued.count === 0) {
        const [test] = await sql`
          select 1 from subscriptions.deliveries where subscription_id = ${sub.id} and id = ${req.webhookId} and event_type = ${TEST_EVENT_TYPE}`;
        if (test) throw new FailedPreconditionError("a test event is not sent again; send a new one with POST .../test");
        throw new NotFoundError(`no delivery ${JSON.stringify(req.webhookId)} of this subscription`);
      }
      deps.pokeWorker();
      return { queued: queued.count };
    },

    async redeliverSince(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const sub = await loadSubscription(sql, principal.orgId, req.id);
      if (!req.since) throw new InvalidArgumentError("since required: an RFC 3339 time");
      const queued = await sql`
        update subscriptions.deliveries set ${redeliveryReset()}
        where subscription_id = ${sub.id} and created_at >= ${timestampDate(req.since)} and event_type <> ${TEST_EVENT_TYPE}`;
      deps.pokeWorker();
      return { queued: queued.count };
    },
  };
}
