import { create, isMessage, type DescMessage, type DescMethod, type DescMethodUnary, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import {
  createContextValues,
  createMethodImplSpec,
  createServiceImplSpec,
  type ConnectRouter,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { NEVER_ABORTS } from "../http/request-context.js";

/**
 * What the internal transports share (in process and over NATS): the handlers services register,
 * looked up by method, and the pieces of a unary call both transports run the same way. Neither
 * goes through Connect's protocol layer: it links abort controllers for every call and aborts them
 * when the call ends, building a DOMException each time, and reads and writes each message as a
 * stream of chunks. On the trigger path that was the largest cost after the handlers themselves.
 */
export interface MethodRegistry {
  /** A router that records what services register. */
  router: ConnectRouter;
  lookup(method: DescMethod): MethodImplSpec | undefined;
  /** Every registered unary method, in the order services registered them. */
  unaryMethods(): UnaryImplSpec[];
}

export type UnaryImplSpec = Extract<MethodImplSpec, { kind: "unary" }>;

/** A router that records the handlers services register, and a lookup by method. */
export function createMethodRegistry(): MethodRegistry {
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
  return {
    router,
    lookup: (method) => specs.get(key(method.parent, method.name)),
    unaryMethods: () => [...specs.values()].filter((spec): spec is UnaryImplSpec => spec.kind === "unary"),
  };
}

/** The request path of a method, `/<package>.<Service>/<Method>`. */
export function pathOf(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

export type UnaryNext = (req: UnaryRequest) => Promise<UnaryResponse>;
/** What an interceptor wraps: a call of any kind, unary or streaming. */
type AnyNext = Parameters<Interceptor>[0];

/**
 * Connect's interceptors are typed for calls of either kind; these transports make only unary
 * calls, so each wrapped call takes and answers unary messages (Connect's own call runner does
 * the same).
 */
export function chainUnary(interceptors: readonly Interceptor[], last: UnaryNext): UnaryNext {
  return interceptors.reduceRight<UnaryNext>((next, interceptor) => interceptor(next as AnyNext) as UnaryNext, last);
}

/** The request a transport hands its client interceptors: the caller's input as a message, once. */
export function unaryRequest<I extends DescMessage, O extends DescMessage>(
  method: DescMethodUnary<I, O>,
  init: { url: string; header: Headers; input: MessageInitShape<I>; contextValues: ContextValues | undefined; signal: AbortSignal },
): UnaryRequest<I, O> {
  return {
    stream: false,
    service: method.parent,
    method,
    requestMethod: "POST",
    url: init.url,
    header: init.header,
    contextValues: init.contextValues ?? createContextValues(),
    message: isMessage(init.input, method.input) ? init.input : create(method.input, init.input),
    signal: init.signal,
  };
}

/**
 * A call's signal when it has a deadline: aborts with a `TimeoutError` when `timeoutMs` have
 * passed, or with the caller's signal. `release` unlinks both once the call has settled. Why not
 * `AbortSignal.timeout` and `AbortSignal.any`: they tie their signals to the garbage collector
 * (weak references, a timer that outlives the call), which made them the largest cost of a call
 * after the handler itself; a call knows when it ends, so it can simply undo its links.
 */
export function signalUntil(timeoutMs: number, caller: AbortSignal | undefined): { signal: AbortSignal; release(): void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException("the call's deadline passed", "TimeoutError")), timeoutMs);
  timer.unref();
  if (!caller || caller === NEVER_ABORTS) return { signal: controller.signal, release: () => clearTimeout(timer) };
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

/**
 * The context a handler is served with. `signal` aborts only at the deadline (or when the
 * transport's caller gives up, in process); no call aborts it merely for having ended.
 */
export function handlerContext(init: {
  method: DescMethod;
  protocolName: string;
  url: string;
  signal: AbortSignal;
  deadline: number | undefined;
  requestHeader: Headers;
  responseHeader?: Headers;
  values: ContextValues;
}): HandlerContext {
  const { deadline } = init;
  return {
    service: init.method.parent,
    method: init.method,
    protocolName: init.protocolName,
    requestMethod: "POST",
    url: init.url,
    signal: init.signal,
    timeoutMs: () => (deadline === undefined ? undefined : Math.max(0, deadline - Date.now())),
    requestHeader: init.requestHeader,
    responseHeader: init.responseHeader ?? new Headers(),
    responseTrailer: new Headers(),
    values: init.values,
  };
}
