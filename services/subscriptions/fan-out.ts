import type { DomainEvent, EventBus } from "../runtime/event-bus.js";
import { EVENTS, onEvent } from "../runtime/events.js";
import type { SubscriptionsDeps } from "./deps.js";
import {
  envelope,
  fromHeartbeatSilent,
  fromIncidentOpened,
  fromIncidentResolved,
  fromTimelineRecorded,
  fromUpdateSent,
  type WebhookEvent,
} from "./event-types.js";
import { newWebhookId } from "./signing.js";

/**
 * Queues one delivery per enabled subscription of the event's organization that names its type.
 * Idempotent: a redelivered event (same outbox id) finds its rows and adds none, so each
 * subscription's webhook-id for an event is fixed the first time.
 */
export async function fanOut(deps: Pick<SubscriptionsDeps, "sql" | "pokeWorker">, event: WebhookEvent, eventId: string): Promise<number> {
  const { sql } = deps;
  const subs = await sql<{ id: string; org_slug: string }[]>`
    select id, org_slug from subscriptions.subscriptions
    where org_id = ${event.orgId} and state = 'enabled' and ${event.type} = any(events)`;
  if (subs.length === 0) return 0;
  const payloads = new Map<string, string>();
  const payloadFor = (slug: string) => {
    const known = payloads.get(slug);
    if (known !== undefined) return known;
    const body = envelope(event.type, event.at, event.data(slug));
    payloads.set(slug, body);
    return body;
  };
  const inserted = await sql`
    insert into subscriptions.deliveries (id, subscription_id, org_id, event_id, event_type, payload)
    select * from unnest(
      ${subs.map(() => newWebhookId())}::text[], ${subs.map((s) => s.id)}::uuid[], ${subs.map(() => event.orgId)}::uuid[],
      ${subs.map(() => eventId)}::text[], ${subs.map(() => event.type)}::text[], ${subs.map((s) => payloadFor(s.org_slug))}::text[])
    on conflict (subscription_id, event_id) do nothing`;
  if (inserted.count > 0) deps.pokeWorker();
  return inserted.count;
}

/**
 * Events each fan-out consumer queues at once, per process. The fan-out needs no order between
 * events (deliveries are not ordered, and each event's rows are written once whatever comes
 * first), so a storm is queued a few events at a time rather than one by one. Each holds a
 * connection of the request pool for two statements: a few, not the whole pool.
 */
export const FAN_OUT_CONCURRENCY = 4;

/**
 * Subscribes the fan-out to every domain event a webhook type comes from, each through a durable
 * consumer: in NATS mode the replicas share the events and a failed fan-out is retried; in one
 * process the outbox relay keeps the event until the fan-out has succeeded.
 */
export async function startFanOut(deps: SubscriptionsDeps, bus: EventBus): Promise<void> {
  const { publicUrl } = deps.config;
  const run = (event: WebhookEvent | undefined, domainEvent: DomainEvent) => (event ? fanOut(deps, event, domainEvent.id).then(() => {}) : Promise.resolve());
  const consumer = (durableName: string) => ({ durableName, concurrency: FAN_OUT_CONCURRENCY });
  await onEvent(bus, EVENTS.incidentOpened, (e, d) => run(fromIncidentOpened(publicUrl, e), d), consumer("subscriptions-incident-opened"));
  await onEvent(bus, EVENTS.timelineRecorded, (e, d) => run(fromTimelineRecorded(publicUrl, e), d), consumer("subscriptions-timeline"));
  await onEvent(bus, EVENTS.incidentResolved, (e, d) => run(fromIncidentResolved(publicUrl, e), d), consumer("subscriptions-incident-resolved"));
  await onEvent(bus, EVENTS.heartbeatSilent, (e, d) => run(fromHeartbeatSilent(e), d), consumer("subscriptions-heartbeat-silent"));
  await onEvent(bus, EVENTS.updateSent, (e, d) => run(fromUpdateSent(publicUrl, e), d), consumer("subscriptions-update-sent"));
}
