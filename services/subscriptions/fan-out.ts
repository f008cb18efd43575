import type { DomainEvent, EventBus } from "../runtime/event-bus.js";
import { EVENTS, onEvent } from "../runtime/events.js";
import { groupCalls } from "../runtime/grouped-calls.js";
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

/** One event to fan out: what subscribers receive, and the domain event's (outbox) id. */
export interface FanOutItem {
  event: WebhookEvent;
  eventId: string;
}

/**
 * Queues one delivery per enabled subscription of each event's organization that names its type,
 * for a group of events in two statements. Idempotent: a redelivered event (same outbox id) finds
 * its rows and adds none, so each subscription's webhook-id for an event is fixed the first time.
 */
export async function fanOut(deps: Pick<SubscriptionsDeps, "sql" | "pokeWorker">, items: FanOutItem[]): Promise<void> {
  const { sql } = deps;
  const matches = await sql<{ i: number; id: string; org_slug: string }[]>`
    select e.i::int, s.id, s.org_slug
    from unnest(${items.map((x) => x.event.orgId)}::uuid[], ${items.map((x) => x.event.type)}::text[]) with ordinality as e(org_id, type, i)
    join subscriptions.subscriptions s on s.org_id = e.org_id and s.state = 'enabled' and e.type = any(s.events)`;
  if (matches.length === 0) return;
  // One body per event and organization slug: the subscriptions of one organization share it.
  const payloads = new Map<string, string>();
  const payloadFor = (item: FanOutItem, i: number, slug: string) => {
    const key = `${i}\u0000${slug}`;
    const known = payloads.get(key);
    if (known !== undefined) return known;
    const body = envelope(item.event.type, item.event.at, item.event.data(slug));
    payloads.set(key, body);
    return body;
  };
  const rows = matches.map((m) => ({ m, item: items[m.i - 1]! }));
  const inserted = await sql`
    insert into subscriptions.deliveries (id, subscription_id, org_id, event_id, event_type, payload)
    select * from unnest(
      ${rows.map(() => newWebhookId())}::text[], ${rows.map((r) => r.m.id)}::uuid[], ${rows.map((r) => r.item.event.orgId)}::uuid[],
      ${rows.map((r) => r.item.eventId)}::text[], ${rows.map((r) => r.item.event.type)}::text[],
      ${rows.map((r) => payloadFor(r.item, r.m.i, r.m.org_slug))}::text[])
    on conflict (subscription_id, event_id) do nothing`;
  if (inserted.count > 0) deps.pokeWorker();
}

/**
 * Events one fan-out statement pair queues at most. Each consumer hands this many at once to one
 * queue shared by every event type, so a storm's events are queued a group at a time, in one
 * connection of the request pool: the fan-out needs no order between events (deliveries are not
 * ordered, and each event's rows are written once whatever comes first).
 */
export const FAN_OUT_GROUP = 100;

/**
 * Subscribes the fan-out to every domain event a webhook type comes from, each through a durable
 * consumer: in NATS mode the replicas share the events and a failed fan-out is retried; in one
 * process the outbox relay keeps the event until the fan-out has succeeded.
 */
export async function startFanOut(deps: SubscriptionsDeps, bus: EventBus): Promise<void> {
  const { publicUrl } = deps.config;
  const queue = groupCalls<FanOutItem>((items) => fanOut(deps, items), FAN_OUT_GROUP);
  const run = (event: WebhookEvent | undefined, domainEvent: DomainEvent) => (event ? queue({ event, eventId: domainEvent.id }) : Promise.resolve());
  const consumer = (durableName: string) => ({ durableName, concurrency: FAN_OUT_GROUP });
  await onEvent(bus, EVENTS.incidentOpened, (e, d) => run(fromIncidentOpened(publicUrl, e), d), consumer("subscriptions-incident-opened"));
  await onEvent(bus, EVENTS.timelineRecorded, (e, d) => run(fromTimelineRecorded(publicUrl, e), d), consumer("subscriptions-timeline"));
  await onEvent(bus, EVENTS.incidentResolved, (e, d) => run(fromIncidentResolved(publicUrl, e), d), consumer("subscriptions-incident-resolved"));
  await onEvent(bus, EVENTS.heartbeatSilent, (e, d) => run(fromHeartbeatSilent(e), d), consumer("subscriptions-heartbeat-silent"));
  await onEvent(bus, EVENTS.updateSent, (e, d) => run(fromUpdateSent(publicUrl, e), d), consumer("subscriptions-update-sent"));
}
