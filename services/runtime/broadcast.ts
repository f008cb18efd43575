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
}

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
  };
}

export function createNatsBroadcast(nc: NatsConnection): Broadcast {
  const state = connectionState(nc);
  const decoder = new TextDecoder();
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
  };
}
