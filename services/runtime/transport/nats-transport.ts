import { fromBinary, toBinary, type DescMessage, type DescMethod, type DescMethodUnary, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  type ContextValues,
  type Interceptor,
  type Transport,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { appendHeaders } from "@connectrpc/connect";
import {
  codeFromHttpStatus,
  codeToHttpStatus,
  errorFromJsonBytes,
  errorToJsonBytes,
  parseTimeout,
  trailerDemux,
  trailerMux,
} from "@connectrpc/connect/protocol-connect";
import { createInbox, errors, headers as natsHeaders, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/nats-core";
import type { Logger } from "../observability/logger.js";
import { inboxPrefixOf, prefixed, subjectPrefixOf } from "./nats-connection.js";
import { INTERNAL_MESSAGE_MAX_BYTES, replyTooLarge, requestTooLarge } from "./message-limits.js";
import { NEVER_ABORTS, untilAborted } from "../http/request-context.js";
import { chainUnary, handlerContext, invokeUnary, type MethodRegistry, pathOf, signalUntil, type UnaryImplSpec, unaryRequest } from "./unary-call.js";

/**
 * Connect over NATS request/reply. A call is the Connect unary protocol (binary protobuf body,
 * `connect-timeout-ms` deadline, Connect error JSON on failure) carried in one NATS request on
 * subject `rpc.<package>.<Service>.<Method>`; the HTTP status travels in a header. Replicas of a
 * service share a queue group, so NATS spreads calls across them.
 */

const STATUS_HEADER = "Connect-Http-Status";
const DEFAULT_TIMEOUT_MS = 15_000;

/**
 * The NATS subject a method's calls travel on, from its request path (`/pkg.Service/Method` to
 * `rpc.pkg.Service.Method`).
 */
export function subjectForPath(requestPath: string, subjectPrefix = ""): string {
  // "/warroom.identity.v1.IdentityService/Login" -> "rpc.warroom.identity.v1.IdentityService.Login"
  return prefixed(subjectPrefix, `rpc${requestPath.replace(/\//g, ".")}`);
}

function toNatsHeaders(source: Headers, extra?: Record<string, string>): MsgHdrs {
  const h = natsHeaders();
  source.forEach((value, key) => {
    h.set(key, value);
  });
  for (const [key, value] of Object.entries(extra ?? {})) h.set(key, value);
  return h;
}

const TIMEOUT_HEADER = "connect-timeout-ms";
const PROTO_CONTENT_TYPE = "application/proto";
const JSON_CONTENT_TYPE = "application/json";

/**
 * A message from the wire; bytes that are not one answer as Connect's own parsing does. Decoded
 * from a copy: `bytes` is a view of the connection's read buffer, and the message's bytes fields
 * would be views of it too, keeping the whole read alive for as long as the message lives.
 */
function parseBinary<D extends DescMessage>(schema: D, bytes: Uint8Array): MessageShape<D> {
  try {
    return fromBinary(schema, new Uint8Array(bytes));
  } catch (err) {
    throw new ConnectError(`parse binary: ${err instanceof Error ? err.message : String(err)}`, Code.Internal);
  }
}

/** The Connect headers of a NATS message, without the transport's own (status, framing). */
function fromNatsHeaders(source: MsgHdrs | undefined): Headers {
  const h = new Headers();
  if (!source) return h;
  for (const key of source.keys()) {
    if (FRAMING_HEADERS.has(key.toLowerCase())) continue;
    for (const value of source.values(key)) h.append(key, value);
  }
  return h;
}

/**
 * Whether the connection is up. While NATS reconnects, a request would only wait out its
 * deadline; callers are better served by an immediate Unavailable they can retry. A call waiting
 * for its reply when the connection drops is told at once too (`onDisconnect`): the reply, or
 * the rest of its parts, will not come.
 */
export interface ConnectionState {
  connected(): boolean;
  /** Calls `listener` once when the connection next drops; returns how to stop listening. */
  onDisconnect(listener: () => void): () => void;
}

/**
 * Follows the connection's status: whether it is connected now, and listeners told once when it
 * next drops.
 */
export function watchConnection(nc: NatsConnection): ConnectionState {
  let connected = true;
  const listeners = new Set<() => void>();
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect" || status.type === "reconnecting") {
        connected = false;
        const waiting = [...listeners];
        listeners.clear();
        for (const listener of waiting) listener();
      } else if (status.type === "reconnect") connected = true;
    }
  })();
  return {
    connected: () => connected && !nc.isClosed(),
    onDisconnect(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}

const watched = new WeakMap<NatsConnection, ConnectionState>();

/**
 * The one watcher of a connection's status, made on first use and shared by everything that asks.
 */
export function connectionState(nc: NatsConnection): ConnectionState {
  let state = watched.get(nc);
  if (!state) {
    state = watchConnection(nc);
    watched.set(nc, state);
  }
  return state;
}

/**
 * Headers of the framing that carries a message larger than one NATS message (the server's
 * `max_payload`) in parts, kept in one place with the rest of the header handling.
 *
 * A request in parts: the first part goes to the method's subject with `Wr-Parts` and `Wr-Size`;
 * the replica that takes it answers `Wr-Continue: <inbox>` and the caller sends the other parts
 * there. A reply in parts: every part goes to the caller's inbox with `Wr-Part`/`Wr-Parts`, the
 * Connect headers on the first. A message without these headers is one part, as before, so
 * callers and servers of either kind understand each other for every message that fits.
 */
const PARTS_HEADER = "Wr-Parts";
const PART_HEADER = "Wr-Part";
const SIZE_HEADER = "Wr-Size";
const CONTINUE_HEADER = "Wr-Continue";
const FRAMING_HEADERS = new Set([PARTS_HEADER, PART_HEADER, SIZE_HEADER, CONTINUE_HEADER, STATUS_HEADER].map((h) => h.toLowerCase()));
/** Room left in each NATS message for headers (request ids, credentials, deadlines). */
const HEADER_ROOM = 32 * 1024;
const FALLBACK_MAX_PAYLOAD = 1024 * 1024;

/** The largest body one NATS message carries on this connection. */
export function partBytes(nc: NatsConnection): number {
  const maxPayload = nc.info?.max_payload ?? FALLBACK_MAX_PAYLOAD;
  return Math.max(4 * 1024, maxPayload - HEADER_ROOM);
}

function split(body: Uint8Array, size: number): Uint8Array[] {
  if (body.byteLength <= size) return [body];
  const parts: Uint8Array[] = [];
  for (let offset = 0; offset < body.byteLength; offset += size) parts.push(body.subarray(offset, Math.min(offset + size, body.byteLength)));
  return parts;
}

function join(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const length = parts.reduce((n, p) => n + p.byteLength, 0);
  const out = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.byteLength;
  }
  return out;
}

/** Collects the parts of one message; `add` answers the whole once every part has arrived. */
function assembler(): { add(index: number, count: number, data: Uint8Array): Uint8Array | undefined } {
  let parts: Uint8Array[] | undefined;
  let received = 0;
  return {
    add(index, count, data) {
      parts ??= new Array<Uint8Array>(count);
      if (index < 0 || index >= parts.length || parts[index]) return undefined;
      parts[index] = data;
      received++;
      return received === parts.length ? join(parts) : undefined;
    },
  };
}

function headerNumber(h: MsgHdrs | undefined, name: string, fallback: number): number {
  const value = Number(h?.get(name) || NaN);
  return Number.isSafeInteger(value) && value >= 0 ? value : fallback;
}

type ReplyListener = (err: Error | null, msg: Msg) => void;

/**
 * The replies of every call a connection makes arrive on one wildcard subscription under the
 * connection's inbox prefix, each call on a subject of its own (`<inbox>.<token>`). A
 * subscription per call would cost two more protocol messages and a change to the server's
 * subscription table on every call.
 */
interface ReplyInbox {
  /** A reply subject of its own for one call, and how to stop listening on it. */
  open(listener: ReplyListener): { subject: string; close(): void };
}

const replyInboxes = new WeakMap<NatsConnection, ReplyInbox>();

function replyInboxOf(nc: NatsConnection): ReplyInbox {
  let inbox = replyInboxes.get(nc);
  if (!inbox) {
    inbox = openReplyInbox(nc);
    replyInboxes.set(nc, inbox);
  }
  return inbox;
}

function openReplyInbox(nc: NatsConnection): ReplyInbox {
  // Under the connection's own inbox prefix: a NATS user may read only its own replies.
  const prefix = `${createInbox(inboxPrefixOf(nc))}.`;
  const listeners = new Map<string, ReplyListener>();
  let next = 0;
  nc.subscribe(`${prefix}*`, {
    callback: (err, msg) => {
      if (err) {
        // The subscription is over (a permissions error, say): every call waiting fails, and the
        // next call opens a new one.
        if (replyInboxes.get(nc) === inbox) replyInboxes.delete(nc);
        const waiting = [...listeners.values()];
        listeners.clear();
        for (const listener of waiting) listener(err, msg);
        return;
      }
      listeners.get(msg.subject.slice(prefix.length))?.(null, msg);
    },
  });
  const inbox: ReplyInbox = {
    open(listener) {
      const token = (next++).toString(36);
      listeners.set(token, listener);
      return { subject: prefix + token, close: () => listeners.delete(token) };
    },
  };
  return inbox;
}

/**
 * One call: sends the request (in parts when it is larger than a NATS message) and collects the
 * reply's parts on the call's own reply subject, until the deadline or the caller's signal.
 */
function exchange(
  nc: NatsConnection,
  state: ConnectionState,
  subject: string,
  body: Uint8Array,
  header: Headers,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<{ headers: MsgHdrs | undefined; data: Uint8Array }> {
  const parts = split(body, partBytes(nc));
  return new Promise((resolve, reject) => {
    let first: MsgHdrs | undefined;
    const reply = assembler();
    let done = false;
    const finish = (err: unknown, value?: { headers: MsgHdrs | undefined; data: Uint8Array }) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      stopWatching();
      signal?.removeEventListener("abort", onAbort);
      inbox.close();
      if (err) reject(err);
      else resolve(value!);
    };
    const onAbort = () => finish(abortReason(signal!));
    const timer = setTimeout(() => finish(new errors.TimeoutError()), timeoutMs);
    const stopWatching = state.onDisconnect(() =>
      finish(new ConnectError(`the NATS connection dropped while waiting for the reply on ${subject}`, Code.Unavailable)),
    );
    const inbox = replyInboxOf(nc).open((err, msg) => {
      if (err) return finish(err);
      if (msg.data.length === 0 && msg.headers?.code === 503) return finish(new errors.NoRespondersError(subject));
      const more = msg.headers?.get(CONTINUE_HEADER);
      if (more) {
        try {
          for (let i = 1; i < parts.length; i++) {
            const h = natsHeaders();
            h.set(PART_HEADER, String(i));
            nc.publish(more, parts[i]!, { headers: h });
          }
        } catch (publishError) {
          finish(publishError);
        }
        return;
      }
      const index = headerNumber(msg.headers, PART_HEADER, 0);
      if (index === 0) first = msg.headers;
      const whole = reply.add(index, Math.max(1, headerNumber(msg.headers, PARTS_HEADER, 1)), msg.data);
      if (whole) finish(undefined, { headers: first, data: whole });
    });
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const extra: Record<string, string> = parts.length > 1 ? { [PARTS_HEADER]: String(parts.length), [SIZE_HEADER]: String(body.byteLength) } : {};
      nc.publish(subject, parts[0]!, { reply: inbox.subject, headers: toNatsHeaders(header, extra) });
    } catch (err) {
      finish(err);
    }
  });
}

function abortReason(signal: AbortSignal): ConnectError {
  const reason: unknown = signal.reason;
  if (reason instanceof ConnectError) return reason;
  if (reason instanceof DOMException && reason.name === "TimeoutError") return new ConnectError("deadline exceeded", Code.DeadlineExceeded);
  return new ConnectError("the call was canceled", Code.Canceled);
}

function natsErrorToConnect(err: unknown, path: string): ConnectError {
  if (err instanceof ConnectError) return err;
  const cause = err instanceof errors.RequestError && err.cause ? err.cause : err;
  if (cause instanceof errors.NoRespondersError || (err instanceof errors.RequestError && err.isNoResponders())) {
    return new ConnectError(`no service is answering ${path}`, Code.Unavailable);
  }
  if (cause instanceof errors.TimeoutError) {
    return new ConnectError(`deadline exceeded calling ${path}`, Code.DeadlineExceeded);
  }
  if (cause instanceof errors.ClosedConnectionError || cause instanceof errors.DrainingConnectionError) {
    return new ConnectError(`the NATS connection is closed calling ${path}`, Code.Unavailable);
  }
  const message = err instanceof Error ? err.message : String(err);
  if (/max_payload|MAX_PAYLOAD|payload/i.test(message)) {
    return new ConnectError(`message too large for NATS calling ${path}: ${message}`, Code.ResourceExhausted);
  }
  return new ConnectError(`NATS request failed calling ${path}: ${message}`, Code.Unavailable);
}

/**
 * A Connect Transport whose calls travel as NATS requests: the client interceptors, then the
 * request encoded once and sent, and the reply decoded once (see unary-call.ts for why not
 * Connect's own client).
 */
export function createNatsTransport(
  nc: NatsConnection,
  options: { defaultTimeoutMs?: number; interceptors?: Interceptor[]; maxMessageBytes?: number } = {},
): Transport {
  const maxMessageBytes = options.maxMessageBytes ?? INTERNAL_MESSAGE_MAX_BYTES;
  const defaultTimeoutMs = options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  const interceptors = options.interceptors ?? [];
  const state = connectionState(nc);
  const subjectPrefix = subjectPrefixOf(nc);
  // A method's path and subject, made once: a process calls a few dozen methods.
  const routes = new Map<DescMethod, { path: string; subject: string }>();
  const routeOf = (method: DescMethod) => {
    let known = routes.get(method);
    if (!known) {
      const path = pathOf(method);
      known = { path, subject: subjectForPath(path, subjectPrefix) };
      routes.set(method, known);
    }
    return known;
  };
  return {
    async unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: ConstructorParameters<typeof Headers>[0],
      input: MessageInitShape<I>,
      contextValues?: ContextValues,
    ): Promise<UnaryResponse<I, O>> {
      const { path, subject } = routeOf(method);
      const call = chainUnary(interceptors, async (req) => {
        const body = toBinary(method.input, req.message as MessageShape<I>);
        // Refused here, before anything is sent: no handler runs for a message over the limit.
        if (body.byteLength > maxMessageBytes) throw requestTooLarge(body.byteLength, maxMessageBytes, path);
        if (!state.connected()) throw new ConnectError(`NATS is unreachable calling ${path}`, Code.Unavailable);
        const timeoutHeader = Number(req.header.get(TIMEOUT_HEADER));
        const waitMs = Number.isFinite(timeoutHeader) && timeoutHeader > 0 ? timeoutHeader : defaultTimeoutMs;
        let reply: { headers: MsgHdrs | undefined; data: Uint8Array };
        try {
          reply = await exchange(nc, state, subject, body, req.header, waitMs, req.signal === NEVER_ABORTS ? undefined : req.signal);
        } catch (err) {
          throw natsErrorToConnect(err, path);
        }
        const status = Number(reply.headers?.get(STATUS_HEADER) || 200);
        const [responseHeader, trailer] = trailerDemux(fromNatsHeaders(reply.headers));
        if (reply.data.byteLength > maxMessageBytes) throw replyTooLarge(reply.data.byteLength, maxMessageBytes, path);
        if (status !== 200) {
          const fallback = new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status), responseHeader);
          if (!responseHeader.get("content-type")?.startsWith("application/json")) throw fallback;
          throw errorFromJsonBytes(reply.data, appendHeaders(responseHeader, trailer), fallback);
        }
        const message = parseBinary(method.output, reply.data);
        return { stream: false, service: method.parent, method, header: responseHeader, message, trailer } as UnaryResponse;
      });
      const requestHeader = new Headers(header);
      requestHeader.set("content-type", PROTO_CONTENT_TYPE);
      requestHeader.set("connect-protocol-version", "1");
      if (timeoutMs !== undefined && timeoutMs > 0) requestHeader.set(TIMEOUT_HEADER, String(timeoutMs));
      const request = unaryRequest(method, { url: `nats://rpc${path}`, header: requestHeader, input, contextValues, signal: signal ?? NEVER_ABORTS });
      return (await call(request as UnaryRequest)) as UnaryResponse<I, O>;
    },
    async stream() {
      throw new ConnectError("streaming RPCs are not carried over the NATS transport", Code.Unimplemented);
    },
  };
}

/** The NATS side of a process's RPC server. */
export interface NatsRpcServer {
  subscriptions: Subscription[];
  /**
   * Stops taking calls: leaves the queue groups so NATS routes new calls to other replicas, answers
   * a call still delivered to this process afterwards with Unavailable (the caller learns at once
   * and may retry elsewhere, instead of waiting out its deadline), and waits up to `timeoutMs` for
   * the calls already taken to be answered.
   */
  drain(timeoutMs: number): Promise<void>;
}

/**
 * Serves the registry's unary methods over NATS, through `interceptors` as on every other surface.
 * Each method is one subscription in the queue group named after its proto service, so the
 * replicas of a service share its calls.
 */
export function serveOverNats(
  nc: NatsConnection,
  registry: MethodRegistry,
  options: { logger: Logger; interceptors?: Interceptor[]; services?: string[]; maxMessageBytes?: number; defaultTimeoutMs?: number },
): NatsRpcServer {
  const subscriptions: Subscription[] = [];
  const served = {
    logger: options.logger,
    interceptors: options.interceptors ?? [],
    maxMessageBytes: options.maxMessageBytes ?? INTERNAL_MESSAGE_MAX_BYTES,
    defaultTimeoutMs: options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS,
  };
  const inFlight = new Set<Promise<void>>();
  let draining = false;
  for (const spec of registry.unaryMethods()) {
    const typeName = spec.method.parent.typeName;
    if (options.services && !options.services.includes(typeName)) continue;
    const path = pathOf(spec.method);
    subscriptions.push(
      nc.subscribe(subjectForPath(path, subjectPrefixOf(nc)), {
        queue: typeName,
        callback: (err, msg) => {
          if (err) {
            options.logger.error({ err, method: path }, "NATS subscription failed");
            return;
          }
          if (draining) {
            if (msg.reply)
              safely(() => respondError(nc, msg.reply!, new ConnectError("the service is shutting down; retry", Code.Unavailable)), options.logger);
            return;
          }
          const call = answer(nc, spec, path, msg, served);
          inFlight.add(call);
          void call.finally(() => inFlight.delete(call));
        },
      }),
    );
  }
  return {
    subscriptions,
    async drain(timeoutMs) {
      draining = true;
      // drain, not unsubscribe: calls NATS has already handed to this client still reach the
      // callback (and are refused there) instead of being discarded unanswered.
      const drained = subscriptions.map((sub) => sub.drain().catch(() => {}));
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled([...drained, ...inFlight]),
        new Promise((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
        }),
      ]);
      clearTimeout(timer);
    },
  };
}

/**
 * A Connect error as Connect's unary protocol answers it: the HTTP status its code maps to, the
 * error JSON, and its metadata as headers (beside any the handler set).
 */
function errorReply(error: ConnectError, header = new Headers()): { status: number; header: Headers; body: Uint8Array } {
  header.set("content-type", JSON_CONTENT_TYPE);
  error.metadata.forEach((value, key) => {
    header.set(key, value);
  });
  return { status: codeToHttpStatus(error.code), header, body: errorToJsonBytes(error, {}) };
}

/** Sends a Connect error as the whole reply, before or instead of the handler. */
function respondError(nc: NatsConnection, replyTo: string, error: ConnectError): void {
  const reply = errorReply(error);
  nc.publish(replyTo, reply.body, { headers: toNatsHeaders(reply.header, { [STATUS_HEADER]: String(reply.status) }) });
}

/** The rest of a request sent in parts, on a private inbox the caller is told of. */
function receiveParts(nc: NatsConnection, msg: Msg, count: number, timeoutMs: number): Promise<Uint8Array> {
  // Under the connection's own inbox prefix: a NATS user may read only its own replies.
  const inbox = createInbox(inboxPrefixOf(nc));
  const parts = assembler();
  parts.add(0, count, msg.data);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      sub.unsubscribe();
      reject(new ConnectError("the rest of the request did not arrive before its deadline", Code.DeadlineExceeded));
    }, timeoutMs);
    const sub = nc.subscribe(inbox, {
      callback: (err, part) => {
        if (err) return;
        const whole = parts.add(headerNumber(part.headers, PART_HEADER, -1), count, part.data);
        if (whole) {
          clearTimeout(timer);
          sub.unsubscribe();
          resolve(whole);
        }
      },
    });
    const h = natsHeaders();
    h.set(CONTINUE_HEADER, inbox);
    msg.respond(new Uint8Array(0), { headers: h });
  });
}

interface Served {
  logger: Logger;
  interceptors: Interceptor[];
  maxMessageBytes: number;
  defaultTimeoutMs: number;
}

/**
 * One call taken from NATS: its request (in parts, if it came in parts), the handler through the
 * server interceptors, and the reply as Connect's unary protocol has it (status, headers with
 * trailers as `trailer-*`, binary body or error JSON), in parts if it is larger than a NATS message.
 */
async function answer(nc: NatsConnection, spec: UnaryImplSpec, path: string, msg: Msg, served: Served): Promise<void> {
  if (!msg.reply) return;
  const replyTo = msg.reply;
  const { logger, maxMessageBytes } = served;
  let deadline: { signal: AbortSignal; release(): void } | undefined;
  try {
    const count = Math.max(1, headerNumber(msg.headers, PARTS_HEADER, 1));
    const size = headerNumber(msg.headers, SIZE_HEADER, msg.data.byteLength);
    // Refused before the handler runs (and before the rest of the parts are asked for).
    if (size > maxMessageBytes) return respondError(nc, replyTo, requestTooLarge(size, maxMessageBytes, path));
    const requestHeader = fromNatsHeaders(msg.headers);
    const timeout = parseTimeout(requestHeader.get(TIMEOUT_HEADER), Number.MAX_SAFE_INTEGER);
    const data = count > 1 ? await receiveParts(nc, msg, count, timeout.timeoutMs || served.defaultTimeoutMs) : msg.data;
    if (data.byteLength > maxMessageBytes) return respondError(nc, replyTo, requestTooLarge(data.byteLength, maxMessageBytes, path));
    const responseHeader = new Headers({ "content-type": PROTO_CONTENT_TYPE });
    let status = 200;
    let body: Uint8Array;
    // The handler's signal aborts at the deadline, and only then.
    if (timeout.timeoutMs && !timeout.error) deadline = signalUntil(timeout.timeoutMs, undefined);
    const context = handlerContext({
      method: spec.method,
      protocolName: "connect",
      url: `nats://rpc${path}`,
      signal: deadline?.signal ?? NEVER_ABORTS,
      deadline: timeout.timeoutMs ? Date.now() + timeout.timeoutMs : undefined,
      requestHeader,
      responseHeader,
      values: createContextValues(),
    });
    try {
      if (timeout.error) throw timeout.error;
      const contentType = requestHeader.get("content-type");
      if (contentType !== PROTO_CONTENT_TYPE) throw new ConnectError(`unsupported content type ${contentType} calling ${path}`, Code.InvalidArgument);
      const input = parseBinary(spec.method.input, data);
      const output = await untilAborted(invokeUnary(spec, context, input, served.interceptors), context.signal);
      body = toBinary(spec.method.output, output);
      if (body.byteLength > maxMessageBytes) {
        // The work is done (perhaps committed); the caller gets a clean error it can act on rather
        // than a reply NATS would refuse.
        logger.error({ method: path, bytes: body.byteLength }, "reply over the internal message limit");
        throw replyTooLarge(body.byteLength, maxMessageBytes, path);
      }
    } catch (err) {
      const reply = errorReply(
        err instanceof ConnectError ? err : new ConnectError("internal error", Code.Internal, undefined, undefined, err),
        responseHeader,
      );
      status = reply.status;
      body = reply.body;
    }
    const header = trailerMux(responseHeader, context.responseTrailer);
    const parts = split(body, partBytes(nc));
    for (const [i, part] of parts.entries()) {
      const extra: Record<string, string> = parts.length > 1 ? { [PART_HEADER]: String(i), [PARTS_HEADER]: String(parts.length) } : {};
      nc.publish(replyTo, part, {
        headers: i === 0 ? toNatsHeaders(header, { ...extra, [STATUS_HEADER]: String(status) }) : toNatsHeaders(new Headers(), extra),
      });
    }
  } catch (err) {
    // Taking the request or sending the reply failed (a part that never came, a closed connection).
    logger.warn({ err, method: path }, "NATS call failed before a response was written");
    safely(() => respondError(nc, replyTo, err instanceof ConnectError ? err : new ConnectError("internal error", Code.Internal)), logger);
  } finally {
    deadline?.release();
  }
}

function safely(fn: () => void, logger: Logger): void {
  try {
    fn();
  } catch (err) {
    logger.error({ err }, "could not send an error reply over NATS");
  }
}
