import { toBinary, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { RawResultSchema, SourceService, type RawResult } from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { MAX_REQUEST_BYTES } from "../protocol/limits.js";
import { PROTOCOL_ROUTES } from "../protocol/protocol-routes.js";
import { Unauthenticated, type Authenticator } from "./auth.js";
import { callFailure, tooLarge, type OnCallError, type SourceCalls } from "./calls.js";
import { sendJson } from "../../runtime/http/http-server.js";

/** Serves the protocol as gRPC (`warroom.sourceprotocol.v1.SourceService`). */
export function createGrpcHandler(deps: { calls: SourceCalls; authenticator: Authenticator; maxResponseBytes: number; onError: OnCallError }) {
  const { calls, authenticator, maxResponseBytes, onError } = deps;

  const authInterceptor: Interceptor = (next) => async (req) => {
    try {
      authenticator.authenticate(req.header.get("authorization"), undefined);
    } catch (err) {
      if (err instanceof Unauthenticated) throw new ConnectError(err.message, Code.Unauthenticated);
      throw err;
    }
    return next(req);
  };

  // Innermost: a handler's failure becomes its status, named after the protocol's call in onError.
  const failureInterceptor: Interceptor = (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      const answer = callFailure(err, callName(req.method), onError);
      throw new ConnectError(answer.message, answer.grpc);
    }
  };

  /** A read: an answer above maxResponseBytes is cut to a partial result. */
  const read =
    <Request>(run: (request: Request, signal: AbortSignal) => Promise<RawResult>) =>
    async (request: Request, context: HandlerContext): Promise<RawResult> => {
      const result = await run(request, context.signal);
      return toBinary(RawResultSchema, result).byteLength > maxResponseBytes ? tooLarge(result) : result;
    };

  return connectNodeAdapter({
    grpc: true,
    grpcWeb: false,
    connect: false,
    readMaxBytes: MAX_REQUEST_BYTES,
    // Reads are cut to maxResponseBytes above; the margin leaves room for the partial envelope.
    writeMaxBytes: maxResponseBytes + 64 * 1024,
    // mTLS is checked by the TLS layer before any request; bearer tokens here.
    interceptors: authenticator.bearer ? [authInterceptor, failureInterceptor] : [failureInterceptor],
    routes(router) {
      router.service(SourceService, {
        capabilities: () => calls.capabilities(),
        health: (_request, context) => calls.health(context.signal),
        invoke: read(calls.invoke),
        metricsList: read(calls.metricsList),
        metricsRange: read(calls.metricsRange),
        logsStreams: read(calls.logsStreams),
        logsRange: read(calls.logsRange),
      });
    },
    fallback: (_req, res) => sendJson(res, 404, { error: "not found" }),
  });
}

function callName(method: DescMethod): string {
  return PROTOCOL_ROUTES.find((route) => route.method === method)?.call ?? method.name;
}
