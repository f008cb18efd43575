import type { DescMessage, DescMethodUnary, MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues, type Interceptor, type Transport, type UnaryRequest, type UnaryResponse } from "@connectrpc/connect";
import { INTERNAL_MESSAGE_MAX_BYTES, replyTooLarge, requestTooLarge } from "./message-limits.js";
import { encodedSizeAtMost } from "./message-size.js";
import { NEVER_ABORTS, untilAborted } from "../http/request-context.js";
import { chainUnary, handlerContext, invokeUnary, type MethodRegistry, pathOf, signalUntil, unaryRequest } from "./unary-call.js";

/**
 * One-process mode's transport: a call goes straight to the handler, through the same client and
 * server interceptors as any other transport, with no serialization in between. The Connect
 * in-memory transport encodes and decodes every message as if it crossed a network; between
 * services sharing a heap that is most of a call's cost. The contract suite runs over this
 * transport too, so it behaves as the others do (codes, metadata, details, deadlines).
 *
 * A signal is made only when the call has a deadline; the caller's own signal is passed through
 * otherwise (see unary-call.ts for why not Connect's own call runner).
 */
export function createDirectTransport(
  registry: MethodRegistry,
  options: { serverInterceptors?: Interceptor[]; clientInterceptors?: Interceptor[]; maxMessageBytes?: number } = {},
): Transport {
  const maxMessageBytes = options.maxMessageBytes ?? INTERNAL_MESSAGE_MAX_BYTES;
  const serverInterceptors = options.serverInterceptors ?? [];
  const clientInterceptors = options.clientInterceptors ?? [];
  return {
    async unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: ConstructorParameters<typeof Headers>[0],
      input: MessageInitShape<I>,
      contextValues?: ContextValues,
    ): Promise<UnaryResponse<I, O>> {
      const path = pathOf(method);
      const spec = registry.lookup(method);
      if (spec?.kind !== "unary") throw new ConnectError(`no service is answering ${path}`, Code.Unimplemented);
      const deadline = timeoutMs !== undefined && timeoutMs > 0 ? Date.now() + timeoutMs : undefined;
      const callSignal = deadline === undefined ? undefined : signalUntil(timeoutMs!, signal);
      const call = chainUnary(clientInterceptors, async (req) => {
        // The same message limit as over NATS, so the two modes behave alike: an oversize request
        // is refused before the handler runs, an oversize reply answers a clean error.
        const request = encodedSizeAtMost(req.method.input, req.message, maxMessageBytes);
        if (!request.within) throw requestTooLarge(request.bytes!, maxMessageBytes, path);
        const context = handlerContext({
          method,
          protocolName: "direct",
          url: req.url,
          signal: req.signal,
          deadline,
          requestHeader: req.header,
          values: req.contextValues,
        });
        const message = await untilAborted(invokeUnary(spec, context, req.message, serverInterceptors), req.signal);
        const reply = encodedSizeAtMost(req.method.output, message, maxMessageBytes);
        if (!reply.within) throw replyTooLarge(reply.bytes!, maxMessageBytes, path);
        return { stream: false, service: method.parent, method, header: context.responseHeader, message, trailer: context.responseTrailer } as UnaryResponse;
      });
      const requestHeader = new Headers(header);
      // The server side reads the deadline from the header, as over every other transport.
      if (deadline !== undefined) requestHeader.set("connect-timeout-ms", String(timeoutMs));
      try {
        // The handler registered for the method answers with the method's output.
        const request = unaryRequest(method, {
          url: `direct://${path}`,
          header: requestHeader,
          input,
          contextValues,
          signal: callSignal?.signal ?? signal ?? NEVER_ABORTS,
        });
        return (await call(request as UnaryRequest)) as UnaryResponse<I, O>;
      } finally {
        callSignal?.release();
      }
    },
    async stream() {
      throw new ConnectError("streaming RPCs are not carried between services", Code.Unimplemented);
    },
  };
}
