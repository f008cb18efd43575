import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import { Code, ConnectError, type Interceptor, type Transport } from "@connectrpc/connect";

/**
 * The call being served, carried through async work: its request id, so that every internal call
 * it makes (over NATS or in memory) sends it on and every log line can name it; and its deadline
 * and signal, so that every internal call it makes gets only the caller's remaining budget and
 * stops when the caller gives up.
 */
interface CallContext {
  requestId: string;
  /** Epoch milliseconds after which the caller no longer waits, when it set a deadline. */
  deadline?: number;
  /** Aborts when the caller gives up (deadline passed, call canceled, client gone). */
  signal?: AbortSignal;
}

const storage = new AsyncLocalStorage<CallContext>();

/**
 * A signal that never aborts, for calls made without a deadline or cancellation: nothing is ever
 * linked to it (a listener on a shared, never-ending signal would only accumulate).
 */
export const NEVER_ABORTS: AbortSignal = new AbortController().signal;

export const REQUEST_ID_HEADER = "x-request-id";

const REQUEST_ID_SHAPE = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The caller's request id when it is one (up to 128 characters of letters, digits and `._:-`),
 * else a new one: the id is written into every log line and sent on every internal call, so a
 * caller must not be able to put 8,000 characters, or line breaks, there.
 */
export function acceptRequestId(value: string | null | undefined): string | undefined {
  return value && REQUEST_ID_SHAPE.test(value) ? value : undefined;
}

/** Settles with the call, or rejects as soon as the signal aborts (deadline or cancellation). */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal === NEVER_ABORTS) return promise;
  if (signal.aborted) return Promise.reject(abortError(signal));
  return new Promise<T>((resolve, reject) => {
    const watch = new AbortWatch(signal, reject);
    promise.then(
      (value) => {
        watch.stop();
        resolve(value);
      },
      (err: unknown) => {
        watch.stop();
        reject(signal.aborted ? abortError(signal) : err);
      },
    );
  });
}

/** Rejects when the signal aborts; the signal's listener is the watch itself (`handleEvent`), not a new function per call. */
class AbortWatch {
  constructor(
    private readonly signal: AbortSignal,
    private readonly reject: (err: ConnectError) => void,
  ) {
    signal.addEventListener("abort", this, { once: true });
  }

  handleEvent(): void {
    this.reject(abortError(this.signal));
  }

  stop(): void {
    this.signal.removeEventListener("abort", this);
  }
}

function abortError(signal: AbortSignal): ConnectError {
  const reason: unknown = signal.reason;
  if (reason instanceof ConnectError) return reason;
  if (reason instanceof DOMException && reason.name === "TimeoutError") return new ConnectError("deadline exceeded", Code.DeadlineExceeded);
  return new ConnectError("the call was canceled", Code.Canceled);
}

/** The request id of the call being served, if any. */
export function currentRequestId(): string | undefined {
  return storage.getStore()?.requestId;
}

/**
 * Runs `fn` with `requestId` as the current request id, for the log lines and calls it makes,
 * keeping the deadline and signal of the call being served, if any.
 */
export function runWithRequestId<T>(requestId: string, fn: () => T): T {
  return storage.run({ ...storage.getStore(), requestId }, fn);
}

/** The deadline (epoch ms) of the call being served, if it has one. */
export function currentDeadline(): number | undefined {
  return storage.getStore()?.deadline;
}

/** Runs `fn` outside the call being served: its calls carry no deadline, signal or request id of that call. */
export function outsideCall<T>(fn: () => T): T {
  return storage.exit(fn);
}

/**
 * Throws DeadlineExceeded (or Canceled) when the call being served has been given up: a check to
 * make before starting work that cannot be taken back, such as a database transaction.
 */
export function throwIfCallerGaveUp(): void {
  const context = storage.getStore();
  if (!context) return;
  if (context.signal?.aborted || (context.deadline !== undefined && Date.now() >= context.deadline)) {
    throw callerGaveUp(context.signal);
  }
}

function callerGaveUp(signal: AbortSignal | undefined): ConnectError {
  const reason: unknown = signal?.reason;
  if (reason instanceof ConnectError)
    return reason.code === Code.Canceled ? reason : new ConnectError("the caller's deadline has passed", Code.DeadlineExceeded);
  return new ConnectError("the caller's deadline has passed", Code.DeadlineExceeded);
}

/**
 * Runs `fn` with the current call's request id and deadline but not its cancellation: work that
 * must finish once started (its answer is kept for the sender's retry) goes on when the sender
 * hangs up, and still ends at the deadline.
 */
export function detachedFromCancellation<T>(fn: () => T): T {
  const context = storage.getStore();
  if (!context) return fn();
  // The deadline alone ends the work: the calls it makes carry it (withCallerDeadline) and
  // throwIfCallerGaveUp reads it, so no signal of its own is needed.
  return storage.run({ requestId: context.requestId, deadline: context.deadline }, fn);
}

/** The deadline a request carries: Connect's `connect-timeout-ms` or gRPC's `grpc-timeout`. */
export function deadlineOf(header: Headers, now = Date.now()): number | undefined {
  const connect = header.get("connect-timeout-ms");
  if (connect !== null) {
    const ms = Number(connect);
    return Number.isFinite(ms) && ms > 0 ? now + ms : undefined;
  }
  const grpc = header.get("grpc-timeout");
  const match = grpc ? /^(\d{1,8})([HMSmun])$/.exec(grpc) : null;
  if (!match) return undefined;
  const unit = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 }[match[2] as "H"];
  return now + Number(match[1]) * unit;
}

/**
 * Server side: adopts the caller's request id (or makes one), and its deadline and signal, for
 * the duration of the call. A call whose deadline has already passed when it arrives (it waited
 * in a queue, or the server was stalled) is refused before the handler starts any work.
 */
export function requestIdServerInterceptor(): Interceptor {
  return (next) => (req) => {
    const requestId = acceptRequestId(req.header.get(REQUEST_ID_HEADER)) || currentRequestId() || randomUUID();
    const deadline = deadlineOf(req.header);
    if (req.signal.aborted || (deadline !== undefined && Date.now() >= deadline)) {
      return Promise.reject(callerGaveUp(req.signal));
    }
    return storage.run({ requestId, deadline, signal: req.signal === NEVER_ABORTS ? undefined : req.signal }, () => next(req));
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

/**
 * A transport whose calls, made while serving a call, carry that call's remaining budget as their
 * deadline (the smaller of it and their own) and end when that call is given up. Without it the
 * next server saw no deadline and worked on for the transport's default 15 s after the caller had
 * stopped waiting.
 */
export function withCallerDeadline(transport: Transport): Transport {
  return {
    unary(method, signal, timeoutMs, header, input, contextValues) {
      const caller = storage.getStore();
      if (caller?.deadline !== undefined || caller?.signal) {
        if (caller.signal?.aborted) return Promise.reject(callerGaveUp(caller.signal));
        if (caller.deadline !== undefined) {
          const remaining = caller.deadline - Date.now();
          if (remaining <= 0) return Promise.reject(callerGaveUp(caller.signal));
          timeoutMs = timeoutMs !== undefined && timeoutMs > 0 ? Math.min(timeoutMs, remaining) : Math.ceil(remaining);
        }
        if (caller.signal && signal !== caller.signal) signal = signal && signal !== NEVER_ABORTS ? AbortSignal.any([signal, caller.signal]) : caller.signal;
      }
      return transport.unary(method, signal, timeoutMs, header, input, contextValues);
    },
    stream: (...args) => transport.stream(...args),
  };
}
