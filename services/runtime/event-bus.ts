import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JetStreamClient } from "@nats-io/jetstream";
import { headers as natsHeaders, type NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "./logger.js";
import { eventsStreamName, prefixed, subjectPrefixOf } from "./nats-connection.js";

export interface DomainEvent {
  /** The outbox id; also the JetStream Nats-Msg-Id, so a republished event is dropped. */
  id: string;
  /** `events.<kind>`, e.g. `events.incident.opened`. */
  subject: string;
  payload: Uint8Array;
}

export type EventHandler = (event: DomainEvent) => Promise<void>;

export interface SubscribeOptions {
  /**
   * Durable: the replicas of one service share the events under this name, each handled once.
   * Without it every process gets every event published after it subscribed (cache invalidation,
   * live views).
   */
  durableName?: string;
}

export interface EventBus {
  publish(event: DomainEvent): Promise<void>;
  subscribe(subject: string, handler: EventHandler, options?: SubscribeOptions): Promise<void>;
  close(): Promise<void>;
}

export const EVENTS_STREAM = "EVENTS";

export function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length) return false;
    if (p[i] !== "*" && p[i] !== s[i]) return false;
  }
  return p.length === s.length;
}

/** One-process mode: events go straight to in-process subscribers. */
export function createInMemoryEventBus(logger: Logger): EventBus {
  const subscribers: { subject: string; handler: EventHandler }[] = [];
  return {
    async publish(event) {
      for (const subscriber of subscribers) {
        if (!subjectMatches(subscriber.subject, event.subject)) continue;
        try {
          await subscriber.handler(event);
        } catch (err) {
          logger.error({ err, subject: event.subject, id: event.id }, "event handler failed");
        }
      }
    },
    async subscribe(subject, handler) {
      subscribers.push({ subject, handler });
    },
    async close() {},
  };
}

/** Production: the EVENTS JetStream stream, deduplicated on Nats-Msg-Id. */
export async function createJetStreamEventBus(nc: NatsConnection, logger: Logger): Promise<EventBus> {
  // With a subject prefix, the stream and its subjects are the installation's own.
  const subjectPrefix = subjectPrefixOf(nc);
  const EVENTS_STREAM = eventsStreamName(subjectPrefix);
  const subjectOf = (subject: string) => prefixed(subjectPrefix, subject);
  const unprefixed = (subject: string) => (subjectPrefix && subject.startsWith(`${subjectPrefix}.`) ? subject.slice(subjectPrefix.length + 1) : subject);
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(EVENTS_STREAM);
  } catch {
    try {
      await jsm.streams.add({
        name: EVENTS_STREAM,
        subjects: [subjectOf("events.>")],
        duplicate_window: 10 * 60 * 1_000_000_000, // ten minutes, in nanoseconds
        max_age: 7 * 24 * 3600 * 1_000_000_000,
      });
    } catch (err) {
      // Another replica created it first.
      await jsm.streams.info(EVENTS_STREAM).catch(() => {
        throw err;
      });
    }
  }
  const js: JetStreamClient = jetstream(nc);
  const stops: (() => void)[] = [];
  return {
    async publish(event) {
      const h = natsHeaders();
      await js.publish(subjectOf(event.subject), event.payload, { msgID: event.id, headers: h });
    },
    async subscribe(subject, handler, options = {}) {
      let consumerName: string;
      if (options.durableName) {
        consumerName = options.durableName;
        await jsm.consumers
          .add(EVENTS_STREAM, {
            durable_name: consumerName,
            filter_subject: subjectOf(subject),
            ack_policy: AckPolicy.Explicit,
            deliver_policy: DeliverPolicy.New,
            max_deliver: 20,
            ack_wait: 30_000_000_000,
          })
          .catch(async (err) => {
            await jsm.consumers.info(EVENTS_STREAM, consumerName).catch(() => {
              throw err;
            });
          });
      } else {
        const info = await jsm.consumers.add(EVENTS_STREAM, {
          filter_subject: subjectOf(subject),
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.New,
          inactive_threshold: 60_000_000_000,
        });
        consumerName = info.name;
      }
      const consumer = await js.consumers.get(EVENTS_STREAM, consumerName);
      const messages = await consumer.consume();
      stops.push(() => void messages.stop());
      void (async () => {
        for await (const m of messages) {
          const id = m.headers?.get("Nats-Msg-Id") ?? `${m.seq}`;
          try {
            await handler({ id, subject: unprefixed(m.subject), payload: m.data });
            m.ack();
          } catch (err) {
            logger.error({ err, subject: m.subject, id }, "event handler failed; will be redelivered");
            m.nak(1000);
          }
        }
      })();
    },
    async close() {
      for (const stop of stops) stop();
    },
  };
}
