import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JetStreamClient, type JsMsg } from "@nats-io/jetstream";
import { headers as natsHeaders, type NatsConnection } from "@nats-io/nats-core";
import type { Logger } from "../observability/logger.js";
import { eventDeadLetters } from "../observability/metrics.js";
import { deadLetterStreamName, eventsStreamName, prefixed, subjectPrefixOf } from "./nats-connection.js";
import { contextFromTraceparent, inSpan, SpanKind, tracingEnabled } from "../observability/tracing.js";

export interface DomainEvent {
  /** The outbox id; also the JetStream Nats-Msg-Id, so a republished event is dropped. */
  id: string;
  /** `events.<kind>`, e.g. `events.incident.opened`. */
  subject: string;
  payload: Uint8Array;
  /** The W3C traceparent of the work that caused the event (JetStream header `traceparent`). */
  traceContext?: string | null;
}

export type EventHandler = (event: DomainEvent) => Promise<void>;

export interface SubscribeOptions {
  /**
   * Durable: the replicas of one service share the events under this name, each handled once.
   * A durable subscriber gets every event the stream holds, including those published before it
   * first subscribed, and a failing one is retried (handlers must be idempotent). Without it
   * every process gets every event published after it subscribed (cache invalidation, live views).
   */
  durableName?: string;
  /**
   * How many events this subscriber handles at once (default 1). At 1 it sees one event at a time,
   * in the order of the stream; above 1, up to that many run together and their order is lost: only
   * for a handler that needs no order between events (each event stands alone and is idempotent).
   * Per process: over NATS each replica handles that many of the durable consumer's events.
   */
  concurrency?: number;
}

/** The concurrency of a subscription: at least one. */
function concurrencyOf(options: SubscribeOptions): number {
  return Math.max(1, Math.floor(options.concurrency ?? 1));
}

/** Runs `work` for each item, at most `limit` at once, started in the items' order. */
async function eachBounded<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

export interface EventBus {
  publish(event: DomainEvent): Promise<void>;
  /**
   * Publishes a batch in order, pipelined where the bus can (every publish in flight before any
   * ack is awaited). One outcome per event: undefined when published, else the error.
   */
  publishMany(events: DomainEvent[]): Promise<(Error | undefined)[]>;
  /** Whether the bus itself answers now: when it does, a failed publish is the message's fault. */
  reachable(): Promise<boolean>;
  subscribe(subject: string, handler: EventHandler, options?: SubscribeOptions): Promise<void>;
  close(): Promise<void>;
}

/** Runs a consumer's handler in a span continuing the event's trace (only with tracing on). */
function consume(handler: EventHandler, event: DomainEvent, consumer: string | undefined): Promise<void> {
  if (!tracingEnabled() || !event.traceContext) return handler(event);
  return inSpan(
    `consume ${event.subject}`,
    {
      kind: SpanKind.CONSUMER,
      parent: contextFromTraceparent(event.traceContext),
      attributes: {
        "messaging.system": "nats",
        "messaging.destination.name": event.subject,
        "messaging.message.id": event.id,
        ...(consumer ? { "messaging.consumer.group.name": consumer } : {}),
      },
    },
    () => handler(event),
  );
}

/** The JetStream headers of an event: its trace context, when it has one. */
function eventHeaders(event: DomainEvent) {
  const h = natsHeaders();
  if (event.traceContext) h.set("traceparent", event.traceContext);
  return h;
}

export const EVENTS_STREAM = "EVENTS";
/** Copies of events a durable consumer failed `deadLetterAfter` times: `deadletter.<consumer>.<subject>`. */
export const DEAD_LETTER_STREAM = "EVENTS_DEAD_LETTERS";

/** How a failing event handler is retried, on both buses. */
export interface RetryPolicy {
  /** The first retry waits this long, each next one twice as long. */
  baseMs: number;
  /** The longest wait between two tries. */
  maxMs: number;
  /** After this many failed deliveries the event is copied to the dead letters (and still retried). */
  deadLetterAfter: number;
}

export const DEFAULT_RETRY: RetryPolicy = { baseMs: 1000, maxMs: 300_000, deadLetterAfter: 10 };

/** The wait before delivery `failures + 1`, after `failures` failed ones. */
export function retryDelayMs(policy: RetryPolicy, failures: number): number {
  return Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, failures - 1));
}

/**
 * Whether a NATS subject matches `pattern`, with `*` (one token) and `>` (the rest) wildcards:
 * made once per subscriber, as every event of every batch is matched against every subscriber.
 */
export function subjectMatcher(pattern: string): (subject: string) => boolean {
  const p = pattern.split(".");
  if (!p.includes("*") && !p.includes(">")) return (subject) => subject === pattern;
  if (p.indexOf(">") === p.length - 1 && !p.includes("*")) {
    const prefix = pattern.slice(0, -1);
    return (subject) => subject.length > prefix.length && subject.startsWith(prefix);
  }
  return (subject) => {
    const s = subject.split(".");
    for (let i = 0; i < p.length; i++) {
      if (p[i] === ">") return s.length > i;
      if (i >= s.length) return false;
      if (p[i] !== "*" && p[i] !== s[i]) return false;
    }
    return p.length === s.length;
  };
}

const errorOf = (err: unknown): Error => (err instanceof Error ? err : new Error(String(err)));

/**
 * One-process mode: the relay hands each batch of events to the in-process subscribers, after the
 * transaction that wrote it has committed (the relay holds none). Each subscriber works through
 * the batch on its own, as a JetStream consumer would: one event at a time in outbox order, or up
 * to its `concurrency` at once, so a slow subscriber never makes another wait for it. A durable
 * subscriber that fails makes the publish of that event fail, so the outbox row stays and the
 * relay retries it with its backoff (and, after its last try, keeps it in the outbox's dead
 * letters): nothing is logged and dropped. Subscribers that already handled the event are not
 * called again on the retry.
 */
export function createInMemoryEventBus(logger: Logger): EventBus {
  const subscribers: { matches(subject: string): boolean; handler: EventHandler; durableName?: string | undefined; concurrency: number }[] = [];
  /** Event id to the subscribers done with it, for events some durable subscriber failed. */
  const done = new Map<string, Set<number>>();
  const DONE_LIMIT = 10_000;

  async function deliverMany(events: DomainEvent[]): Promise<(Error | undefined)[]> {
    const finished = events.map((event) => done.get(event.id) ?? new Set<number>());
    const failures = events.map((): string[] => []);
    await Promise.all(
      subscribers.map(async (subscriber, index) => {
        const mine = events.flatMap((event, i) => (!finished[i]!.has(index) && subscriber.matches(event.subject) ? [i] : []));
        await eachBounded(mine, subscriber.concurrency, async (i) => {
          const event = events[i]!;
          try {
            await consume(subscriber.handler, event, subscriber.durableName);
            finished[i]!.add(index);
          } catch (err) {
            if (subscriber.durableName) {
              failures[i]!.push(`${subscriber.durableName}: ${errorOf(err).message}`);
            } else {
              // A live view missed one event; it is not retried (nor is it over JetStream once it has gone).
              logger.warn({ err, subject: event.subject, id: event.id }, "event handler failed");
              finished[i]!.add(index);
            }
          }
        });
      }),
    );
    return events.map((event, i) => {
      if (failures[i]!.length === 0) {
        done.delete(event.id);
        return undefined;
      }
      done.set(event.id, finished[i]!);
      if (done.size > DONE_LIMIT) done.delete(done.keys().next().value!);
      return new Error(`event handler failed: ${failures[i]!.join("; ")}`);
    });
  }

  return {
    async publish(event) {
      const [err] = await deliverMany([event]);
      if (err) throw err;
    },
    async publishMany(events) {
      return deliverMany(events);
    },
    async reachable() {
      return true;
    },
    async subscribe(subject, handler, options = {}) {
      subscribers.push({ matches: subjectMatcher(subject), handler, durableName: options.durableName, concurrency: concurrencyOf(options) });
    },
    async close() {},
  };
}

async function ensureStream(
  jsm: Awaited<ReturnType<typeof jetstreamManager>>,
  config: { name: string; subjects: string[]; duplicate_window: number; max_age: number },
) {
  try {
    await jsm.streams.info(config.name);
  } catch {
    try {
      await jsm.streams.add(config);
    } catch (err) {
      // Another replica created it first.
      await jsm.streams.info(config.name).catch(() => {
        throw err;
      });
    }
  }
}

const SECOND_NS = 1_000_000_000;

/** Production: the EVENTS JetStream stream, deduplicated on Nats-Msg-Id. */
export async function createJetStreamEventBus(nc: NatsConnection, logger: Logger, options: { retry?: Partial<RetryPolicy> } = {}): Promise<EventBus> {
  const retry: RetryPolicy = { ...DEFAULT_RETRY, ...options.retry };
  // With a subject prefix (NATS_SUBJECT_PREFIX), the streams and their subjects are the installation's own.
  const subjectPrefix = subjectPrefixOf(nc);
  const EVENTS_STREAM = eventsStreamName(subjectPrefix);
  const DEAD_LETTER_STREAM = deadLetterStreamName(subjectPrefix);
  const subjectOf = (subject: string) => prefixed(subjectPrefix, subject);
  const unprefixed = (subject: string) => (subjectPrefix && subject.startsWith(`${subjectPrefix}.`) ? subject.slice(subjectPrefix.length + 1) : subject);
  const jsm = await jetstreamManager(nc);
  await ensureStream(jsm, { name: EVENTS_STREAM, subjects: [subjectOf("events.>")], duplicate_window: 600 * SECOND_NS, max_age: 7 * 24 * 3600 * SECOND_NS });
  await ensureStream(jsm, {
    name: DEAD_LETTER_STREAM,
    subjects: [subjectOf("deadletter.>")],
    duplicate_window: 600 * SECOND_NS,
    max_age: 30 * 24 * 3600 * SECOND_NS,
  });
  const js: JetStreamClient = jetstream(nc);
  const stops: (() => void)[] = [];
  /**
   * Acks, naks and progress notes go out on a connection that may have just closed: the message
   * is then redelivered after its ack wait, and the loop must go on rather than end.
   */
  const settle = (reply: () => void) => {
    try {
      reply();
    } catch (err) {
      logger.warn({ err }, "could not answer the stream about a message; it will be redelivered");
    }
  };
  /** Dead-letter copies made by this process (the stream also drops a repeated copy by id). */
  const copied = new Set<string>();

  async function copyToDeadLetters(m: JsMsg, consumer: string, id: string, err: unknown): Promise<void> {
    const key = `${consumer}:${id}`;
    if (copied.has(key)) return;
    try {
      const h = natsHeaders();
      h.set("Warroom-Original-Subject", m.subject);
      h.set("Warroom-Original-Id", id);
      h.set("Warroom-Original-Sequence", String(m.seq));
      h.set("Warroom-Consumer", consumer);
      h.set("Warroom-Deliveries", String(m.info.deliveryCount));
      // A header value is one line.
      h.set(
        "Warroom-Error",
        errorOf(err)
          .message.replace(/[\r\n]+/g, " ")
          .slice(0, 1000),
      );
      await js.publish(subjectOf(`deadletter.${consumer}.${unprefixed(m.subject)}`), m.data, { msgID: key, headers: h });
      copied.add(key);
      if (copied.size > 10_000) copied.delete(copied.values().next().value!);
      eventDeadLetters.inc({ consumer });
      logger.error(
        { err, consumer, subject: m.subject, id, deliveries: m.info.deliveryCount, stream: DEAD_LETTER_STREAM },
        "event handler keeps failing; copied to the dead letters and still retried",
      );
    } catch (copyErr) {
      logger.error(
        { err: copyErr, consumer, subject: m.subject, id },
        "could not copy a failing event to the dead letters; will try again on its next failure",
      );
    }
  }

  return {
    async publish(event) {
      await js.publish(subjectOf(event.subject), event.payload, { msgID: event.id, headers: eventHeaders(event) });
    },
    async publishMany(events) {
      const settled = await Promise.allSettled(
        events.map((event) => js.publish(subjectOf(event.subject), event.payload, { msgID: event.id, headers: eventHeaders(event) })),
      );
      return settled.map((s) => (s.status === "fulfilled" ? undefined : errorOf(s.reason)));
    },
    async reachable() {
      if (nc.isClosed()) return false;
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([jsm.streams.info(EVENTS_STREAM), new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("timeout")), 2000)))]);
        return true;
      } catch {
        return false;
      } finally {
        clearTimeout(timer);
      }
    },
    async subscribe(subject, handler, options = {}) {
      let consumerName: string;
      if (options.durableName) {
        consumerName = options.durableName;
        // At 0 from the start, so the first dead letter is an increase (WarroomDeadLetters).
        eventDeadLetters.inc({ consumer: consumerName }, 0);
        const config = {
          durable_name: consumerName,
          filter_subject: subjectOf(subject),
          ack_policy: AckPolicy.Explicit,
          // All: events published before the consumer first existed are delivered too (the
          // handlers are idempotent, so a replay is safe). New would lose them.
          deliver_policy: DeliverPolicy.All,
          // Retried for as long as the stream keeps the message (max_age), with backoff by nak.
          max_deliver: -1,
          ack_wait: 30 * SECOND_NS,
        };
        await jsm.consumers.add(EVENTS_STREAM, config).catch(async (err) => {
          // It exists (created by another replica, or by an older release with a delivery limit):
          // bring its retry settings up to date. Its deliver policy cannot change, and needs not:
          // it has been tracking the stream since it was created.
          await jsm.consumers.update(EVENTS_STREAM, consumerName, { max_deliver: -1, ack_wait: 30 * SECOND_NS }).catch(async () => {
            await jsm.consumers.info(EVENTS_STREAM, consumerName).catch(() => {
              throw err;
            });
          });
        });
      } else {
        const info = await jsm.consumers.add(EVENTS_STREAM, {
          filter_subject: subjectOf(subject),
          ack_policy: AckPolicy.Explicit,
          deliver_policy: DeliverPolicy.New,
          inactive_threshold: 60 * SECOND_NS,
        });
        consumerName = info.name;
      }
      const consumer = await js.consumers.get(EVENTS_STREAM, consumerName);
      let messages = await consumer.consume();
      let closed = false;
      stops.push(() => {
        closed = true;
        void messages.stop();
      });
      const handle = async (m: JsMsg) => {
        const id = m.headers?.get("Nats-Msg-Id") || `${m.seq}`;
        // A slow handler (a database failing over) keeps its claim instead of being redelivered alongside.
        const working = setInterval(() => settle(() => m.working()), 10_000);
        try {
          await consume(
            handler,
            { id, subject: unprefixed(m.subject), payload: m.data, traceContext: m.headers?.get("traceparent") || null },
            options.durableName,
          );
          settle(() => m.ack());
        } catch (err) {
          const failures = m.info.deliveryCount;
          if (options.durableName && failures >= retry.deadLetterAfter) await copyToDeadLetters(m, consumerName, id, err);
          else logger.warn({ err, subject: m.subject, id, failures }, "event handler failed; will be redelivered");
          settle(() => m.nak(retryDelayMs(retry, failures)));
        } finally {
          clearInterval(working);
        }
      };
      const concurrency = concurrencyOf(options);
      /** Handlers running now, when more than one may. */
      const active = new Set<Promise<void>>();
      void (async () => {
        for (;;) {
          try {
            for await (const m of messages) {
              if (concurrency === 1) {
                await handle(m);
                continue;
              }
              // Up to `concurrency` at once: the next message is taken once a handler is done.
              const running: Promise<void> = handle(m).finally(() => active.delete(running));
              active.add(running);
              if (active.size >= concurrency) await Promise.race(active);
            }
          } catch (err) {
            logger.error({ err, consumer: consumerName }, "event consumer stopped reading");
          }
          // A durable consumer outlives this loop: read it again rather than stop handling events.
          if (closed || nc.isClosed() || !options.durableName) return;
          await new Promise((r) => setTimeout(r, 1000));
          try {
            messages = await consumer.consume();
          } catch (err) {
            logger.error({ err, consumer: consumerName }, "event consumer could not resume; will try again");
          }
        }
      })();
    },
    async close() {
      for (const stop of stops) stop();
    },
  };
}
