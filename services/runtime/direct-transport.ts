import { create, isMessage, type DescMessage, type DescMethod, type DescMethodUnary, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createMethodImplSpec,
  createServiceImplSpec,
  type ContextValues,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type Transport,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { invokeUnaryImplementation } from "@connectrpc/connect/protocol";
import { INTERNAL_MESSAGE_MAX_BYTES, replyTooLarge, requestTooLarge } from "./message-limits.js";
import { encodedSizeAtMost } from "./message-size.js";
import { NEVER_ABORTS, untilAborted } from "./request-context.js";

/**
 * One-process mode's transport: a call goes straight to the handler, through the same client and
 * server interceptors as any other transport, with no serialization in between. The Connect
 * in-memory transport encodes and decodes every message as if it crossed a network; between
 * services sharing a heap that is most of a call's cost. The contract suite runs over this
 * transport too, so it behaves as the others do (codes, metadata, details, deadlines).
 */
export interface DirectRegistry {
  /** A router that records what services register, for the direct transport to call. */
  router: ConnectRouter;
  lookup(method: DescMethod): MethodImplSpec | undefined;
}

/**
 * A router that records the handlers services register, and a lookup by method, for the direct (in-
 * process) transport.
 */
export function createDirectRegistry(): DirectRegistry {
  const specs = new Map<string, MethodImplSpec>();
  const key = (service: DescService, name: string) => `${service.typeName}/${name}`;
  const router: ConnectRouter = {
    handlers: [],
    service(service, impl) {
      const spec = createServiceImplSpec(service, impl);
      for (const method of service.methods) {
        const methodSpec = spec.methods[method.localName];
        if (methodSpec && (impl as Record<string, unknown>)[method.localName] !== undefined) specs.set(key(service, method.name), methodSpec);
      }
      return this;
    },
    rpc(method, impl) {
      specs.set(key(method.parent, method.name), createMethodImplSpec(method, impl));
      return this;
    },
  };
  return { router, lookup: (method) => specs.get(key(method.parent, method.name)) };
}

/** A signal that never aborts, for calls made without one: no listener is ever added to it. */
const NEVER = NEVER_ABORTS;

type UnaryNext = (req: UnaryRequest) => Promise<UnaryResponse>;
/** What an interceptor wraps: a call of any kind, unary or streaming. */
type AnyNext = Parameters<Interceptor>[0];

/**
 * Connect's interceptors are typed for calls of either kind; this transport makes only unary
 * calls, so each wrapped call takes and answers unary messages (Connect's own call runner does
 * the same).
 */
function chain(interceptors: readonly Interceptor[], last: UnaryNext): UnaryNext {
  return interceptors.reduceRight<UnaryNext>((next, interceptor) => interceptor(next as AnyNext) as UnaryNext, last);
}

/**
 * Why not Connect's own call runner: it links abort controllers for every call and aborts them
 * when the call ends, building a DOMException each time; with three in-process calls per delivery
 * that was the largest single cost in a profile of the trigger endpoint. Here a signal is made
 * only when the call has a deadline, and the caller's own signal is passed through otherwise.
 */
export function createDirectTransport(
  registry: DirectRegistry,
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
      const path = `/${method.parent.typeName}/${method.name}`;
      const spec = registry.lookup(method);
      if (spec?.kind !== "unary") throw new ConnectError(`no service is answering ${path}`, Code.Unimplemented);
      const deadline = timeoutMs !== undefined && timeoutMs > 0 ? Date.now() + timeoutMs : undefined;
      const callSignal = deadline === undefined ? undefined : signalUntil(timeoutMs!, signal);
      const call = chain(clientInterceptors, async (req) => {
        // The same message limit as over NATS, so the two modes behave alike: an oversize request
        // is refused before the handler runs, an oversize reply answers a clean error.
        const request = encodedSizeAtMost(req.method.input, req.message, maxMessageBytes);
        if (!request.within) throw requestTooLarge(request.bytes!, maxMessageBytes, path);
        const context = {
          service: method.parent,
          method,
          protocolName: "direct",
          requestMethod: "POST",
          url: req.url,
          signal: req.signal,
          timeoutMs: () => (deadline === undefined ? undefined : Math.max(0, deadline - Date.now())),
          requestHeader: req.header,
          responseHeader: new Headers(),
          responseTrailer: new Headers(),
          values: req.contextValues,
        } as unknown as HandlerContext;
        const message = await untilAborted(invokeUnaryImplementation(spec, context, req.message, serverInterceptors), req.signal);
        const reply = encodedSizeAtMost(req.method.output, message, maxMessageBytes);
        if (!reply.within) throw replyTooLarge(reply.bytes!, maxMessageBytes, path);
        return { stream: false, service: method.parent, method, header: context.responseHeader, message, trailer: context.responseTrailer } as UnaryResponse;
      });
      const requestHeader = new Headers(header);
      // The server side reads the deadline from the header, as over every other transport.
      if (deadline !== undefined) requestHeader.set("connect-timeout-ms", String(timeoutMs));
      try {
        // The handler registered for the method answers with the method's output.
        return (await call({
          stream: false,
          service: method.parent,
          method,
          requestMethod: "POST",
          url: `direct://${path}`,
          header: requestHeader,
          contextValues: contextValues ?? createContextValues(),
          message: isMessage(input, method.input) ? input : create(method.input, input),
          signal: callSignal?.signal ?? signal ?? NEVER,
        } as UnaryRequest)) as UnaryResponse<I, O>;
      } finally {
        callSignal?.release();
      }
    },
    async stream() {
      throw new ConnectError("streaming RPCs are not carried between services", Code.Unimplemented);
    },
  };
}

/**
 * A call's signal when it has a deadline: aborts with a `TimeoutError` when `timeoutMs` have
 * passed, or with the caller's signal. `release` unlinks both once the call has settled. Why not
 * `AbortSignal.timeout` and `AbortSignal.any`: they tie their signals to the garbage collector
 * (weak references, a timer that outlives the call), which made them the largest cost of a call
 * after the handler itself; a call knows when it ends, so it can simply undo its links.
 */
function signalUntil(timeoutMs: number, caller: AbortSignal | undefined): { signal: AbortSignal; release(): void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException("the call's deadline passed", "TimeoutError")), timeoutMs);
  timer.unref();
  if (!caller || caller === NEVER) return { signal: controller.signal, release: () => clearTimeout(timer) };
  const onCallerAbort = () => controller.abort(caller.reason);
  if (caller.aborted) onCallerAbort();
  else caller.addEventListener("abort", onCallerAbort, { once: true });
  return {
    signal: controller.signal,
    release() {
      clearTimeout(timer);
      caller.removeEventListener("abort", onCallerAbort);
    },
  };
}
