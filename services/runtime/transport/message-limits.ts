import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The largest message (request or reply, protobuf binary) one internal call may carry, over every
 * transport. A remote-source read may be 4 MiB of provider JSON (spec: Limits); carried as a
 * `google.protobuf.Struct` beside its shaped series it can grow to about three times that, so the
 * limit leaves room for it. Pages of lists and timelines keep every other reply far below it.
 *
 * Over NATS a message above the server's `max_payload` travels in parts (see nats-transport.ts),
 * so this limit does not depend on the NATS server's configuration.
 */
export const INTERNAL_MESSAGE_MAX_BYTES = 16 * 1024 * 1024;

/** The error a call is refused with when its request is over the internal message limit. */
export function requestTooLarge(bytes: number, limit: number, path: string): ConnectError {
  return new ConnectError(`request of ${bytes} bytes is over the internal message limit of ${limit} bytes calling ${path}`, Code.ResourceExhausted);
}

/** The error a call fails with when its reply is over the internal message limit. */
export function replyTooLarge(bytes: number, limit: number, path: string): ConnectError {
  return new ConnectError(`reply of ${bytes} bytes is over the internal message limit of ${limit} bytes from ${path}`, Code.ResourceExhausted);
}
