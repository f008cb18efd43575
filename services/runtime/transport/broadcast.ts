import type { NatsConnection } from "@nats-io/nats-core";
import { connectionState } from "./nats-transport.js";
import { prefixed, subjectPrefixOf } from "./nats-connection.js";

/**
 * Fire-and-forget notices every process must see at once (a credential was replaced): core NATS
 * publish/subscribe across processes, plain function calls in one process. Not durable: whoever
 * relies on it must also stop trusting what it cached while the broadcast is unavailable.
 */
export interface Broadcast {
  /** Resolves once the notice has left this process (NATS flushed). */
  publish(subject: string, data: string): Promise<void>;
  subscribe(subject: string, handler: (data: string) => void): void;
  /** False while notices may be missed (NATS disconnected). */
  available(): boolean;
  /**
   * Calls `handler` on every change of the connection's state (disconnect, reconnect, ...):
   * notices may have been missed around it, so whatever was cached on their strength is void.
   */
  onStateChange(handler: () => void): void;
}

/**
 * Subject a change to a custom source (its rules, how it takes its credential, a rotation, a
 * revocation, a deletion) is broadcast on by intake, with the source's id, before the change is
 * answered: every intake replica drops what it cached of that source at once.
 */
export const CUSTOM_SOURCE_CHANGED = "credentials.custom_source.changed";

/**
 * Subject a change to an organization's grouping overrides (one set or deleted, a configuration
 * file applied) is broadcast on by intake, with the organization's id, before the change is
 * answered: every intake replica drops its cached copy of that organization's overrides, so the
 * next delivery, on whichever replica, groups as the change says.
 */
export const GROUPING_OVERRIDES_CHANGED = "intake.grouping_overrides.changed";

/**
 * Subject a change to an organization's correlation settings (set, deleted, a configuration file
 * applied) is broadcast on by intake, with the organization's id, before the change is answered:
 * every intake replica drops its cached copy of that organization's settings.
 */
export const CORRELATION_CHANGED = "intake.correlation.changed";

/**
 * Subject an organization's first (or any new) subscription is broadcast on by the subscriptions
 * service, with the organization's id, before the creation is answered: every replica's fan-out
 * stops trusting its cached "this organization subscribes to nothing".
 */
export const SUBSCRIPTION_CREATED = "subscriptions.created";

/**
 * Subject every change to an organization's remote-source connections (one created, updated or
 * deleted, its investigation reads set) is broadcast on by the remote-source service, with the
 * organization's id, before the change is answered: every replica's investigation starter stops
 * trusting its cached "this organization has no investigation read".
 */
export const REMOTE_SOURCE_CHANGED = "remotesource.connections.changed";

/**
 * A broadcast for a process that has every service in it: a notice reaches this process's
 * subscribers only, at once.
 */
export function createInProcessBroadcast(): Broadcast {
  const handlers = new Map<string, ((data: string) => void)[]>();
  return {
    async publish(subject, data) {
      for (const handler of handlers.get(subject) ?? []) handler(data);
    },
    subscribe(subject, handler) {
      handlers.set(subject, [...(handlers.get(subject) ?? []), handler]);
    },
    available: () => true,
    // One process never misses its own notices.
    onStateChange() {},
  };
}

/** Status events around which messages may have been lost. */
const CONNECTION_CHANGES = new Set<string>(["disconnect", "reconnecting", "reconnect", "staleConnection", "forceReconnect", "close"]);

/**
 * A broadcast over plain NATS publish: a notice reaches every process's subscribers, and the state
 * listeners hear of every disconnect and reconnect.
 */
export function createNatsBroadcast(nc: NatsConnection): Broadcast {
  const state = connectionState(nc);
  const decoder = new TextDecoder();
  const listeners: (() => void)[] = [];
  let watching = false;
  return {
    async publish(subject, data) {
      nc.publish(prefixed(subjectPrefixOf(nc), `broadcast.${subject}`), data);
      await nc.flush();
    },
    subscribe(subject, handler) {
      nc.subscribe(prefixed(subjectPrefixOf(nc), `broadcast.${subject}`), {
        callback: (err, msg) => {
          if (!err) handler(decoder.decode(msg.data));
        },
      });
    },
    available: () => state.connected(),
    onStateChange(handler) {
      listeners.push(handler);
      if (!watching) {
        watching = true;
        void (async () => {
          for await (const status of nc.status()) {
            if (!CONNECTION_CHANGES.has(status.type)) continue;
            for (const listener of listeners) listener();
          }
        })();
      }
    },
  };
}
