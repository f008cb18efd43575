import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Socket } from "node:net";
import { create, type DescMessage, type DescMethod, type MessageShape } from "@bufbuild/protobuf";
import { RawResultSchema, SourceService, type RawResult } from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { MAX_REQUEST_BYTES } from "../protocol/limits.js";
import { encodeProtocolJson, fromProtocolJson, ProtocolJsonError } from "../protocol/protocol-json.js";
import { PROTOCOL_ROUTES } from "../protocol/protocol-routes.js";
import { readBodyAtMost } from "../../runtime/http/body-reads.js";
import { sendJson, sendJsonText } from "../../runtime/http/http-server.js";
import { Unauthenticated, type Authenticator } from "./auth.js";
import { callFailure, tooLarge, type OnCallError, type SourceCalls } from "./calls.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

/** One call in its HTTP-JSON form: the request decoded from JSON (or ProtocolJsonError), then run and encoded. */
type JsonEndpoint = (body: unknown) => (signal: AbortSignal) => Promise<string>;

/**
 * Serves the protocol's JSON paths. Answers a request and returns true, or returns false for one
 * that is not for a JSON path (gRPC).
 */
export function createJsonHandler(deps: {
  calls: SourceCalls;
  authenticator: Authenticator;
  maxResponseBytes: number;
  onError: OnCallError;
}): (req: Request, res: Response) => boolean {
  const { calls, authenticator, maxResponseBytes, onError } = deps;
  const jsonRoutes = new Map(PROTOCOL_ROUTES.map((route) => [route.path, route]));

  function endpoint<I extends DescMessage, O extends DescMessage>(
    method: { input: I; output: O },
    run: (request: MessageShape<I>, signal: AbortSignal) => Promise<MessageShape<O>>,
    encode: (message: MessageShape<O>) => string = (message) => encodeProtocolJson(method.output, message),
  ): JsonEndpoint {
    return (body) => {
      const request = body === undefined ? create(method.input) : fromProtocolJson(method.input, body);
      return async (signal) => encode(await run(request, signal));
    };
  }

  /** A read's answer: one above maxResponseBytes is cut to a partial result. */
  function encodeRead(result: RawResult): string {
    const text = encodeProtocolJson(RawResultSchema, result);
    return Buffer.byteLength(text) > maxResponseBytes ? encodeProtocolJson(RawResultSchema, tooLarge(result)) : text;
  }

  const m = SourceService.method;
  const endpoints = new Map<DescMethod, JsonEndpoint>([
    [m.capabilities, endpoint(m.capabilities, () => calls.capabilities())],
    [m.health, endpoint(m.health, (_request, signal) => calls.health(signal))],
    [m.invoke, endpoint(m.invoke, calls.invoke, encodeRead)],
    [m.metricsList, endpoint(m.metricsList, calls.metricsList, encodeRead)],
    [m.metricsRange, endpoint(m.metricsRange, calls.metricsRange, encodeRead)],
    [m.logsStreams, endpoint(m.logsStreams, calls.logsStreams, encodeRead)],
    [m.logsRange, endpoint(m.logsRange, calls.logsRange, encodeRead)],
  ]);

  async function serveJson(req: Request, res: Response, path: string): Promise<void> {
    const route = jsonRoutes.get(path)!;
    if (req.method !== route.httpMethod) {
      return sendJson(res, 405, { error: `use ${route.httpMethod} for ${path}` }, { allow: route.httpMethod });
    }
    try {
      authenticator.authenticate(header(req, "authorization"), req.socket as Socket);
    } catch (err) {
      if (err instanceof Unauthenticated) return sendJson(res, 401, { error: err.message }, { "www-authenticate": "Bearer" });
      throw err;
    }
    let body: unknown;
    if (route.httpMethod === "POST") {
      const bytes = await readBodyAtMost(req, MAX_REQUEST_BYTES);
      if (bytes === "too-large") return sendJson(res, 413, { error: `request body is larger than ${MAX_REQUEST_BYTES} bytes` }, { connection: "close" });
      try {
        body = bytes.length === 0 ? {} : JSON.parse(bytes.toString("utf8"));
      } catch {
        return sendJson(res, 400, { error: "request body is not valid JSON" });
      }
    }
    let run: (signal: AbortSignal) => Promise<string>;
    try {
      run = endpoints.get(route.method)!(body);
    } catch (err) {
      return sendJson(res, 400, { error: err instanceof ProtocolJsonError ? err.message : "request body is not valid JSON" });
    }
    const abort = new AbortController();
    res.on("close", () => abort.abort());
    let text: string;
    try {
      text = await run(abort.signal);
    } catch (err) {
      const answer = callFailure(err, route.call, onError);
      return sendJson(res, answer.status, { error: answer.message });
    }
    sendJsonText(res, 200, text);
  }

  return (req, res) => {
    const path = new URL(req.url ?? "/", "http://source.invalid").pathname;
    const contentType = header(req, "content-type") ?? "";
    if (!jsonRoutes.has(path) || contentType.startsWith("application/grpc")) return false;
    serveJson(req, res, path).catch((err) => {
      onError(err, path);
      if (!res.headersSent) sendJson(res, 500, { error: "internal error" });
      else res.end();
    });
    return true;
  };
}

function header(req: Request, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}
