import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { createAuthenticator } from "./auth.js";
import { createSourceCalls } from "./calls.js";
import { validateOptions, type SourceServerOptions } from "./definition.js";
import { createGrpcHandler } from "./grpc.js";
import { createJsonHandler } from "./http-json.js";
import { listenSource, type RunningSourceServer, type SourceListenOptions } from "./listen.js";

export interface SourceServer {
  /** A request handler for node:http or node:http2 servers of your own. */
  handler(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse): void;
  /** Serves HTTP-JSON and gRPC on one port (HTTP/1.1 and HTTP/2; TLS when configured). */
  listen(options?: SourceListenOptions): Promise<RunningSourceServer>;
}

/**
 * Builds a source of the remote source protocol, version 1: capabilities, health (fail-closed),
 * invoke and the canonical calls of the declared kinds, over HTTP-JSON and gRPC.
 */
export function createSourceServer(options: SourceServerOptions): SourceServer {
  const config = validateOptions(options);
  const onError = options.onError ?? ((error: unknown, call: string) => console.error(`source call ${call} failed:`, error));
  const deps = {
    calls: createSourceCalls(options, config),
    authenticator: createAuthenticator(options.auth),
    maxResponseBytes: config.maxResponseBytes,
    onError,
  };
  const json = createJsonHandler(deps);
  const grpc = createGrpcHandler(deps);

  function handler(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse): void {
    if (!json(req, res)) grpc(req, res);
  }

  return { handler, listen: (listenOptions) => listenSource(handler, options, listenOptions) };
}
