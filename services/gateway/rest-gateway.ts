import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { randomUUID } from "node:crypto";
import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { sendJson } from "../runtime/http/http-server.js";
import type { Logger } from "../runtime/observability/logger.js";
import { deliveriesRefused, httpDuration, httpRequests } from "../runtime/observability/metrics.js";
import { acceptRequestId, runWithRequestId } from "../runtime/http/request-context.js";
import { extractContext, injectHeaders, inSpan, SpanKind, tracingEnabled } from "../runtime/observability/tracing.js";
import { messageToHttpJson, requestFromHttp, RequestShapeError } from "./http-json.js";
import { bodyLimit, isDeliveryMethod } from "../runtime/http/body-limits.js";
import { closingHeaders, readBodyAtMost, stopReading, type BodyReads, type HeldBodies } from "../runtime/http/body-reads.js";
import { dropinTooLarge, isPlainTextMethod, plainTextAnswer } from "./dropin-answers.js";
import { errorAnswer, methodKey, successStatus } from "./response-rules.js";
import { matchRoute, type Route } from "./route-table.js";
import { signalUntil } from "../runtime/transport/unary-call.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

export { BODY_LIMITS } from "../runtime/http/body-limits.js";

/** Request headers the services read, passed on through the transport. */
const FORWARDED_HEADERS = [
  "authorization",
  "x-service-alertrouter-secret",
  "x-service-chat-secret",
  "x-amz-sns-message-type",
  "user-agent",
  // Retry recognition (intake): a sender's own key, and the error-tracker's request id.
  "idempotency-key",
  "request-id",
];

const CALL_TIMEOUT_MS = 15_000;

/** Of the delivery methods, the ones whose senders take 429 as "slow down and send again" (services/intake/README.md). */
const ANSWERS_429 = /\.(Enqueue[A-Za-z]*|(Create|Close|Acknowledge)OpsgenieAlert|DeliverCustomSource[A-Za-z]*)$/;

/**
 * The REST side of the public port: answers each request whose path matches a `google.api.http`
 * route by calling the method through `transport`. Returns the request handler, which resolves
 * false for any other path. A delivery's body is read within `bodyReads` (none: unbounded), and
 * is then held within `heldBodies` (GATEWAY_DELIVERY_BYTES; none: unbounded) until its answer.
 */
export function createRestGateway(options: { routes: Route[]; transport: Transport; logger: Logger; bodyReads?: BodyReads; heldBodies?: HeldBodies }) {
  const { routes, transport, logger } = options;

  async function handle(req: Request, res: Response, url: URL): Promise<boolean> {
    const match = matchRoute(routes, req.method ?? "GET", url.pathname);
    if (match === undefined) return false;
    const requestId = acceptRequestId(headerValue(req, "x-request-id")) ?? randomUUID();
    res.setHeader("x-request-id", requestId);
    if (match === "method-not-allowed") {
      sendJson(res, 405, { error: `method ${req.method} is not allowed on ${url.pathname}` });
      return true;
    }
    if (match === "malformed-path") {
      sendJson(res, 400, { error: "request path is not valid UTF-8" });
      return true;
    }
    const { route, params } = match;
    if (!tracingEnabled()) return serve(req, res, url, route, params, requestId);
    // The route's span continues the caller's trace (traceparent), and the answer names it.
    return inSpan(
      `${route.httpMethod} ${route.template}`,
      {
        kind: SpanKind.SERVER,
        parent: extractContext(req.headers),
        attributes: { "http.request.method": route.httpMethod, "http.route": route.template, "warroom.request_id": requestId },
      },
      async (span) => {
        const traceparent = injectHeaders().traceparent;
        if (traceparent) res.setHeader("traceparent", traceparent);
        const handled = await serve(req, res, url, route, params, requestId);
        span?.setAttribute("http.response.status_code", res.statusCode);
        return handled;
      },
    );
  }

  async function serve(req: Request, res: Response, url: URL, route: Route, params: Record<string, string>, requestId: string): Promise<boolean> {
    const started = performance.now();
    res.on("finish", () => {
      httpRequests.inc({ route: route.template, method: route.httpMethod, status: String(res.statusCode) });
      httpDuration.observe({ route: route.template }, (performance.now() - started) / 1000);
    });
    const { key, limit, delivery, refusalCode, plainText } = traitsOf(route);
    // A slow sender holds only its own reading slots; past them it is answered at once, in the
    // status its route's senders retry, and its body is not read.
    const unread = delivery ? options.bodyReads?.admit(req, res) : undefined;
    if (unread) {
      stopReading(req, res);
      return refuse(res, route, options.bodyReads!.error(unread, refusalCode), { reason: unread, requestId, started }, closingHeaders(req));
    }
    const body = await readBodyAtMost(req, limit);
    if (delivery && body !== "too-large" && options.heldBodies) {
      // Only memory is bounded here: the gateway cannot tell a wrong credential from a good one,
      // so the slots deliveries take are intake's, once the credential is checked (fair-shares.ts).
      const full = options.heldBodies.hold(req, res, body.byteLength);
      if (full) return refuse(res, route, options.heldBodies.error(full, refusalCode), { reason: "memory", requestId, started }, {});
    }
    if (body === "too-large" && plainText) {
      sendText(res, 413, `request body is larger than ${limit} bytes`, { connection: "close" });
      return true;
    }
    if (body === "too-large") {
      const dropin = dropinTooLarge(key, limit, { requestId, took: (performance.now() - started) / 1000 });
      if (dropin) sendJson(res, dropin.status, dropin.body, { ...dropin.headers, connection: "close" });
      else sendJson(res, 413, { error: `request body is larger than ${limit} bytes` }, { connection: "close" });
      return true;
    }
    let input: ReturnType<typeof requestFromHttp>;
    try {
      input = requestFromHttp(route.method.input, {
        body: route.body === "*" ? parseJsonObject(body) : undefined,
        pathParams: params,
        query: url.searchParams,
        rawBody: route.body && route.body !== "*" ? { field: route.body, bytes: body, contentType: headerValue(req, "content-type") ?? "" } : undefined,
        headers: allHeaders(req),
      });
    } catch (err) {
      if (err instanceof RequestShapeError) {
        if (plainText) sendText(res, 400, err.message);
        else sendJson(res, 400, { error: err.message });
        return true;
      }
      throw err;
    }
    const header = new Headers({ "x-request-id": requestId });
    for (const name of FORWARDED_HEADERS) {
      const value = headerValue(req, name);
      if (value !== undefined) header.set(name, value);
    }
    // The public port has already replaced the caller's header with the client's address.
    const clientAddress = headerValue(req, "x-forwarded-for");
    if (clientAddress) header.set("x-forwarded-for", clientAddress);
    // The call's deadline, and its cancellation when the client goes away before its answer. Only
    // then: aborting after a finished response would build an AbortError and wake every linked
    // signal on every request. In one process the call shares this signal (signalUntil).
    const call = signalUntil(CALL_TIMEOUT_MS, undefined);
    res.on("close", () => {
      if (!res.writableFinished) call.cancel();
    });
    try {
      const response = await runWithRequestId(requestId, () => transport.unary(route.method, call.signal, CALL_TIMEOUT_MS, header, input));
      if (plainText) {
        // Healthchecks answers 201 "Created" to the ping that registered its check.
        const created = (response.message as { result?: string }).result === "Created";
        sendText(res, created ? 201 : 200, created ? "Created" : plainTextAnswer(200, "").text);
        return true;
      }
      const json = messageToHttpJson(route.method.output, response.message);
      const status = successStatus(route.method, json);
      if (status === 204) {
        res.writeHead(204);
        res.end();
      } else {
        sendJson(res, status, json);
      }
    } catch (err) {
      const connectError = ConnectError.from(err);
      if (connectError.code === Code.Canceled && call.signal.aborted) return true;
      const answer = errorAnswer(route.method, connectError, { requestId, took: (performance.now() - started) / 1000 });
      if (answer.status >= 500) logger.warn({ requestId, route: route.template, code: Code[connectError.code], error: connectError.rawMessage }, "call failed");
      else logger.debug({ requestId, route: route.template, status: answer.status }, "request refused");
      if (plainText) {
        const text = plainTextAnswer(answer.status, (answer.body as { error?: string }).error ?? "");
        sendText(res, text.status, text.text, answer.headers);
      } else sendJson(res, answer.status, answer.body, answer.headers);
    } finally {
      call.release();
    }
    return true;
  }

  return handle;
}

/** What the gateway needs to know of a route on every request, worked out on its first. */
interface RouteTraits {
  key: string;
  limit: number;
  delivery: boolean;
  /** Refusals before any work are answered in the status the route's senders retry. */
  refusalCode: Code;
  plainText: boolean;
}

const routeTraits = new WeakMap<Route, RouteTraits>();

function traitsOf(route: Route): RouteTraits {
  let traits = routeTraits.get(route);
  if (!traits) {
    const key = methodKey(route.method);
    traits = {
      key,
      limit: bodyLimit(route.method),
      delivery: isDeliveryMethod(key),
      refusalCode: ANSWERS_429.test(key) ? Code.ResourceExhausted : Code.Unavailable,
      plainText: isPlainTextMethod(key),
    };
    routeTraits.set(route, traits);
  }
  return traits;
}

/** A delivery refused before any work (too many bodies held), counted by reason. */
function refuse(
  res: Response,
  route: Route,
  error: ConnectError,
  request: { reason: string; requestId: string; started: number },
  closing: Record<string, string>,
): true {
  deliveriesRefused.inc({ source: route.method.name, reason: request.reason });
  const answer = errorAnswer(route.method, error, { requestId: request.requestId, took: (performance.now() - request.started) / 1000 });
  sendJson(res, answer.status, answer.body, { ...answer.headers, ...closing });
  return true;
}

/** A plain-text answer (Healthchecks' ping URLs). Over HEAD, Node sends the headers only. */
function sendText(res: Response, status: number, text: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

/**
 * Credentials travel to the services in headers only, never in a message (docs/SECURITY.md): the
 * copy of the request's headers a mapping reads leaves them out.
 */
const CREDENTIAL_HEADERS = new Set(["authorization", "proxy-authorization", "cookie", "x-service-alertrouter-secret", "x-service-chat-secret"]);

/**
 * Every request header but HTTP/2's pseudo-headers and the credentials, repeated values joined as
 * HTTP joins them.
 */
function allHeaders(req: Request): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith(":") || CREDENTIAL_HEADERS.has(name) || value === undefined) continue;
    headers[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  return headers;
}

function headerValue(req: Request, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}

class BodyError extends RequestShapeError {}

function parseJsonObject(bytes: Uint8Array): JsonObject {
  if (bytes.byteLength === 0) return {};
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new BodyError("request body is not valid UTF-8");
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new BodyError("request body is not valid JSON");
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new BodyError("request body must be a JSON object");
  }
  return value as JsonObject;
}
