import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { Clients } from "../runtime/transport/clients.js";
import { RateLimitedError } from "../runtime/errors.js";
import type { IntakeStore } from "./store.js";

/** Failed authentications a client address may make per minute on a chat route or the alert-router receiver. */
export const RECEIVER_FAILURES_PER_MINUTE = 10;

export type ReceiverKind = "chat" | "alertrouter";

/**
 * Resolves a receiver secret (chat or alert-router) to its organization. The secret is checked
 * first, always: the right one is never refused for anybody's failures (chat vendors send from
 * shared address ranges, so a stranger on the same platform must not silence a team's workflow).
 * A wrong one is counted per scope (a chat route, or the alert-router receiver) and client address
 * in one-minute windows shared by every replica, by one statement that returns the new count; past
 * the limit the address gets 429 instead of 401 until the window ends, so a guesser is told to stop,
 * and concurrent guesses cannot pass the limit. Identity audits every failure, coalesced per minute.
 */
export function createReceiverSecrets(deps: { clients: Clients; store: IntakeStore }) {
  const { clients, store } = deps;
  return {
    async resolve(scope: string, kind: ReceiverKind, orgSlug: string, secret: string, context: HandlerContext): Promise<Organization> {
      const address = context.requestHeader.get("x-forwarded-for") ?? "";
      try {
        // The secret travels in its header, never in the message body.
        return await clients.identity.resolveReceiverSecret(
          { kind, orgSlug },
          { signal: context.signal, headers: { "x-forwarded-for": address, [`x-service-${kind}-secret`]: secret } },
        );
      } catch (err) {
        if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
        const failed = await store.receiverFailures.add(scope, address);
        if (failed.failures > RECEIVER_FAILURES_PER_MINUTE) {
          throw new RateLimitedError("too many failed attempts from this address; try again later", Math.max(1, failed.retry_after));
        }
        throw err;
      }
    },
  };
}

export type ReceiverSecrets = ReturnType<typeof createReceiverSecrets>;
