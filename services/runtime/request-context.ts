import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import type { Interceptor } from "@connectrpc/connect";

/**
 * The request id of the call being served, carried through async work so that every internal
 * call it makes (over NATS or in memory) sends it on, and every log line can name it.
 */
const storage = new AsyncLocalStorage<{ requestId: string }>();

export const REQUEST_ID_HEADER = "x-request-id";

export function currentRequestId(): string | undefined {
  return storage.getStore()?.requestId;
}

export function runWithRequestId<T>(requestId: string, fn: () => T): T {
  return storage.run({ requestId }, fn);
}

/** Server side: adopts the caller's request id (or makes one) for the duration of the call. */
export function requestIdServerInterceptor(): Interceptor {
  return (next) => (req) => {
    const requestId = req.header.get(REQUEST_ID_HEADER) || currentRequestId() || randomUUID();
    return runWithRequestId(requestId, () => next(req));
  };
}

/** Client side: sends the current request id with every outgoing internal call. */
export function requestIdClientInterceptor(): Interceptor {
  return (next) => (req) => {
    const requestId = currentRequestId();
    if (requestId && !req.header.get(REQUEST_ID_HEADER)) req.header.set(REQUEST_ID_HEADER, requestId);
    return next(req);
  };
}
