import { SUBSCRIPTION_CREATED } from "../runtime/transport/broadcast.js";
import type { DomainEvent, EventBus } from "../runtime/transport/event-bus.js";
import { EVENTS, onEvent } from "../runtime/transport/events.js";
import { groupCalls } from "../runtime/transport/grouped-calls.js";
import { createRevocableCache } from "../runtime/credentials/revocable-cache.js";
import type { SubscriptionsDeps } from "./deps.js";
import {
  envelope,
  fromHeartbeatSilent,
  fromIncidentOpened,
  fromIncidentResolved,
  fromIncidentUnacknowledged,
  fromTimelineRecorded,
  fromUpdateSent,
  type WebhookEvent,
} from "./event-types.js";
import { webhookIdFor } from "./signing.js";

/** One event to fan out: what subscribers receive, and the domain event's (outbox) id. */
export interface FanOutItem {
  event: WebhookEvent;
  eventId: string;
}

/**
 * Queues one delivery per enabled subscription of each event's organization that names its type,
 * for a group of events in two statements. Idempotent: a redelivered event (same outbox id) has
 * the same webhook-ids (webhookIdFor), so it finds its rows and adds none.
 */
export async function fanOut(deps: Pick<SubscriptionsDeps, "sql" | "pokeWorker">, items: FanOutItem[]): Promise<void> {
  const { sql } = deps;
  const matches = await sql<{ i: number; id: string; org_slug: string }[]>`
    select e.i::int, s.id, s.org_slug
    from unnest(${items.map((x) => x.event.orgId)}::uuid[], ${items.map((x) => x.event.type)}::text[]) with ordinality as e(org_id, type, i)
    join subscriptions.subscriptions s on s.org_id = e.org_id and s.state = 'enabled' and e.type = any(s.events)`;
  if (matches.length === 0) return;
  // Each matched event's body once, built with its organization's slug (every subscription
  // matched for it is of that organization), and its deliveries pointing at it by position.
  const events: { item: FanOutItem; body: string }[] = [];
  const positionOf = new Map<number, number>();
  const deliveries = matches.map((m) => {
    const item = items[m.i - 1]!;
    let position = positionOf.get(m.i);
    if (position === undefined) {
      events.push({ item, body: envelope(item.event.type, item.event.at, item.event.data(m.org_slug)) });
      position = events.length;
      positionOf.set(m.i, position);
    }
    return { id: webhookIdFor(m.id, item.eventId), subscriptionId: m.id, position };
  });
  // Each subscription is locked once (FOR KEY SHARE, which claims and updates never wait for):
  // a delete waits for the rows, then removes them with the rest; one that came first leaves no
  // subscription to queue for.
  const inserted = await sql`
    with locked as (
      select id from subscriptions.subscriptions where id = any(${[...new Set(matches.map((m) => m.id))]}::uuid[]) for key share
    )
    insert into subscriptions.deliveries (id, subscription_id, org_id, event_id, event_type, payload)
    select d.id, d.subscription_id, e.org_id, e.event_id, e.type, e.payload
    from unnest(${deliveries.map((d) => d.id)}::text[], ${deliveries.map((d) => d.subscriptionId)}::uuid[], ${deliveries.map((d) => d.position)}::int[])
      as d(id, subscription_id, position)
    join unnest(${events.map((e) => e.item.event.orgId)}::uuid[], ${events.map((e) => e.item.eventId)}::text[], ${events.map((e) => e.item.event.type)}::text[],
      ${events.map((e) => e.body)}::text[]) with ordinality as e(org_id, event_id, type, payload, position) on e.position = d.position
    where d.subscription_id in (select id from locked)
    on conflict (id) do nothing`;
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
 * Which organizations have a subscription at all, cached per process: an organization without
 * one pays no statement per event. Only a creation turns "none" into "some" (a deletion or a
 * disabled subscription leaves at worst a fan-out statement that finds nothing), and a creation
 * is broadcast to every replica before it is answered. While the broadcast is unavailable, every
 * answer is looked up (revocable-cache.ts).
 */
function subscribedOrganizations(deps: Pick<SubscriptionsDeps, "sql" | "broadcast">) {
  const cache = createRevocableCache<true>({ broadcast: deps.broadcast, subject: SUBSCRIPTION_CREATED });
  const hasAny = (orgId: string) =>
    cache.get(orgId, orgId, async () => {
      const [row] = await deps.sql`select 1 from subscriptions.subscriptions where org_id = ${orgId} limit 1`;
      return row ? true : undefined;
    });
  return {
    /** The items whose organization has a subscription. */
    async keep(items: FanOutItem[]): Promise<FanOutItem[]> {
      const orgs = [...new Set(items.map((item) => item.event.orgId))];
      const answers = await Promise.all(orgs.map(hasAny));
      const subscribing = new Set(orgs.filter((_, i) => answers[i]));
      return items.filter((item) => subscribing.has(item.event.orgId));
    },
  };
}

/**
 * Subscribes the fan-out to every domain event a webhook type comes from, each through a durable
 * consumer: in NATS mode the replicas share the events and a failed fan-out is retried; in one
 * process the outbox relay keeps the event until the fan-out has succeeded.
 */
export async function startFanOut(deps: SubscriptionsDeps, bus: EventBus): Promise<void> {
  const { publicUrl } = deps.config;
  const subscribed = subscribedOrganizations(deps);
  const queue = groupCalls<FanOutItem>(async (items) => {
    const kept = await subscribed.keep(items);
    if (kept.length > 0) await fanOut(deps, kept);
  }, FAN_OUT_GROUP);
  const run = (event: WebhookEvent | undefined, domainEvent: DomainEvent) => (event ? queue({ event, eventId: domainEvent.id }) : Promise.resolve());
  const consumer = (durableName: string) => ({ durableName, concurrency: FAN_OUT_GROUP });
  await onEvent(bus, EVENTS.incidentOpened, (e, d) => run(fromIncidentOpened(publicUrl, e), d), consumer("subscriptions-incident-opened"));
  await onEvent(bus, EVENTS.timelineRecorded, (e, d) => run(fromTimelineRecorded(publicUrl, e), d), consumer("subscriptions-timeline"));
  await onEvent(bus, EVENTS.incidentResolved, (e, d) => run(fromIncidentResolved(publicUrl, e), d), consumer("subscriptions-incident-resolved"));
  await onEvent(
    bus,
    EVENTS.incidentUnacknowledged,
    (e, d) => run(fromIncidentUnacknowledged(publicUrl, e), d),
    consumer("subscriptions-incident-unacknowledged"),
  );
  await onEvent(bus, EVENTS.heartbeatSilent, (e, d) => run(fromHeartbeatSilent(e), d), consumer("subscriptions-heartbeat-silent"));
  await onEvent(bus, EVENTS.updateSent, (e, d) => run(fromUpdateSent(publicUrl, e), d), consumer("subscriptions-update-sent"));
}
