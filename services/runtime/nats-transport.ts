import { Code, ConnectError, type ConnectRouter, type Interceptor, type Transport } from "@connectrpc/connect";
import type { UniversalClientFn, UniversalHandler } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";
import { errors, headers as natsHeaders, type Msg, type MsgHdrs, type NatsConnection, type Subscription } from "@nats-io/nats-core";
import type { Logger } from "./logger.js";
import { prefixed, subjectPrefixOf } from "./nats-connection.js";

/**
 * Connect over NATS request/reply. A call is the Connect unary protocol (binary protobuf body,
 * `connect-timeout-ms` deadline, Connect error JSON on failure) carried in one NATS request on
 * subject `rpc.<package>.<Service>.<Method>`; the HTTP status travels in a header. Replicas of a
 * service share a queue group, so NATS spreads calls across them.
 */

const STATUS_HEADER = "Connect-Http-Status";
const DEFAULT_TIMEOUT_MS = 15_000;
const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

export function subjectForPath(requestPath: string, subjectPrefix = ""): string {
  // "/warroom.identity.v1.IdentityService/Login" -> "rpc.warroom.identity.v1.IdentityService.Login"
  return prefixed(subjectPrefix, "rpc" + requestPath.replace(/\//g, "."));
}

async function readAll(body: AsyncIterable<Uint8Array> | undefined): Promise<Uint8Array> {
  if (!body) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let length = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    length += chunk.byteLength;
  }
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

async function* once(data: Uint8Array): AsyncIterable<Uint8Array> {
  yield data;
}

function toNatsHeaders(source: Headers, extra?: Record<string, string>): MsgHdrs {
  const h = natsHeaders();
  source.forEach((value, key) => h.set(key, value));
  for (const [key, value] of Object.entries(extra ?? {})) h.set(key, value);
  return h;
}

/** The path of a request URL, parsed once per method: the URLs are the transport's own, a few dozen. */
const pathOfUrl = new Map<string, { path: string; subject: string }>();

function route(url: string): { path: string; subject: string } {
  let known = pathOfUrl.get(url);
  if (!known) {
    const path = new URL(url).pathname;
    known = { path, subject: subjectForPath(path) };
    pathOfUrl.set(url, known);
  }
  return known;
}

const encoder = new TextEncoder();

function fromNatsHeaders(source: MsgHdrs | undefined, skip?: string): Headers {
  const h = new Headers();
  if (!source) return h;
  for (const key of source.keys()) {
    if (skip && key.toLowerCase() === skip.toLowerCase()) continue;
    for (const value of source.values(key)) h.append(key, value);
  }
  return h;
}

/**
 * Whether the connection is up. While NATS reconnects, a request would only wait out its
 * deadline; callers are better served by an immediate Unavailable they can retry.
 */
export function watchConnection(nc: NatsConnection): { connected(): boolean } {
  let connected = true;
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect" || status.type === "reconnecting") connected = false;
      else if (status.type === "reconnect") connected = true;
    }
  })();
  return { connected: () => connected && !nc.isClosed() };
}

const watched = new WeakMap<NatsConnection, { connected(): boolean }>();

export function connectionState(nc: NatsConnection): { connected(): boolean } {
  let state = watched.get(nc);
  if (!state) {
    state = watchConnection(nc);
    watched.set(nc, state);
  }
  return state;
}

function natsClient(nc: NatsConnection, defaultTimeoutMs: number): UniversalClientFn {
  const state = connectionState(nc);
  const subjectPrefix = subjectPrefixOf(nc);
  return async (request) => {
    const contentType = request.header.get("content-type") ?? "";
    if (contentType.startsWith("application/connect+")) {
      throw new ConnectError("streaming RPCs are not carried over the NATS transport", Code.Unimplemented);
    }
    const { path, subject } = route(request.url);
    if (!state.connected()) throw new ConnectError(`NATS is unreachable calling ${path}`, Code.Unavailable);
    const timeoutHeader = Number(request.header.get("connect-timeout-ms"));
    const timeout = Number.isFinite(timeoutHeader) && timeoutHeader > 0 ? timeoutHeader : defaultTimeoutMs;
    const body = await readAll(request.body);
    try {
      const reply = await nc.request(prefixed(subjectPrefix, subject), body, {
        timeout,
        headers: toNatsHeaders(request.header),
      });
      const status = Number(reply.headers?.get(STATUS_HEADER) || 200);
      return {
        status,
        header: fromNatsHeaders(reply.headers, STATUS_HEADER),
        body: once(reply.data),
        trailer: new Headers(),
      };
    } catch (err) {
      throw natsErrorToConnect(err, path);
    }
  };
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

const transportDefaults = {
  useBinaryFormat: true,
  interceptors: [] as never[],
  acceptCompression: [] as never[],
  sendCompression: null,
  compressMinBytes: Number.MAX_SAFE_INTEGER,
  readMaxBytes: MAX_MESSAGE_BYTES,
  writeMaxBytes: MAX_MESSAGE_BYTES,
} as const;

/** A Connect Transport whose calls travel as NATS requests. */
export function createNatsTransport(nc: NatsConnection, options: { defaultTimeoutMs?: number; interceptors?: Interceptor[] } = {}): Transport {
  return createTransport({
    ...transportDefaults,
    interceptors: options.interceptors ?? [],
    httpClient: natsClient(nc, options.defaultTimeoutMs ?? DEFAULT_TIMEOUT_MS),
    baseUrl: "nats://rpc",
  });
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
 * Serves a router's unary methods over NATS. Each method is one subscription in the queue group
 * named after its proto service, so the replicas of a service share its calls.
 */
export function serveRouterOverNats(
  nc: NatsConnection,
  router: ConnectRouter,
  options: { logger: Logger; services?: string[] },
): NatsRpcServer {
  const subscriptions: Subscription[] = [];
  const inFlight = new Set<Promise<void>>();
  let draining = false;
  for (const handler of router.handlers) {
    if (handler.method.methodKind !== "unary") continue;
    const typeName = handler.service.typeName;
    if (options.services && !options.services.includes(typeName)) continue;
    subscriptions.push(
      nc.subscribe(subjectForPath(handler.requestPath, subjectPrefixOf(nc)), {
        queue: typeName,
        callback: (err, msg) => {
          if (err) {
            options.logger.error({ err, method: handler.requestPath }, "NATS subscription failed");
            return;
          }
          if (draining) {
            refuse(msg, "unavailable", "the service is shutting down; retry", 503);
            return;
          }
          const call = answer(handler, msg, options.logger);
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

function refuse(msg: Msg, code: string, message: string, status: number): void {
  try {
    msg.respond(encoder.encode(JSON.stringify({ code, message })), {
      headers: toNatsHeaders(new Headers({ "content-type": "application/json" }), { [STATUS_HEADER]: String(status) }),
    });
  } catch {
    // The connection is already closed: the caller's deadline tells it.
  }
}

async function answer(handler: UniversalHandler, msg: Msg, logger: Logger): Promise<void> {
  const controller = new AbortController();
  try {
    const response = await handler({
      httpVersion: "1.1",
      url: `nats://rpc${handler.requestPath}`,
      method: "POST",
      header: fromNatsHeaders(msg.headers),
      body: once(msg.data),
      signal: controller.signal,
    });
    // The handler's own headers object, made for this call: added to, not copied.
    const header = response.header ?? new Headers();
    response.trailer?.forEach((value, key) => header.set(key.startsWith("trailer-") ? key : `trailer-${key}`, value));
    const body = await readAll(response.body);
    msg.respond(body, { headers: toNatsHeaders(header, { [STATUS_HEADER]: String(response.status) }) });
  } catch (err) {
    logger.error({ err, method: handler.requestPath }, "NATS call failed before a response was written");
    refuse(msg, "internal", "internal error", 500);
    // Tells whatever the handler left running that the call is over. A call that answered has
    // nothing left running: aborting it too would only cost an exception object per call.
    controller.abort();
  }
}
