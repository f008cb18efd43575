import {
  create,
  isMessage,
  type DescMessage,
  type DescMethod,
  type DescMethodUnary,
  type DescService,
  type Message,
  type MessageInitShape,
} from "@bufbuild/protobuf";
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
 * Runs a unary handler behind the server interceptors and answers its output as a message: what
 * Connect's `invokeUnaryImplementation` does, without its copies of the context for every call
 * (`Object.assign` of the request's fields and of the handler's: about 3 µs of a delivery, with
 * two calls a delivery, in its profile). The handler gets the transport's context itself unless an
 * interceptor replaced the request's header, signal or values; then a copy that carries them.
 */
export async function invokeUnary(spec: UnaryImplSpec, context: HandlerContext, input: Message, interceptors: readonly Interceptor[]): Promise<Message> {
  const { method } = spec;
  const handle: UnaryNext = async (req) => {
    const handlerContext =
      req.header === context.requestHeader && req.signal === context.signal && req.contextValues === context.values
        ? context
        : { ...context, requestHeader: req.header, signal: req.signal, values: req.contextValues };
    const output = await spec.impl(req.message, handlerContext);
    return {
      stream: false,
      service: method.parent,
      method,
      header: context.responseHeader,
      trailer: context.responseTrailer,
      message: isMessage(output, method.output) ? output : create(method.output, output as MessageInitShape<DescMessage>),
    } as UnaryResponse;
  };
  const next = chainUnary(interceptors, handle);
  const response = await next({
    stream: false,
    service: method.parent,
    method,
    requestMethod: context.requestMethod,
    url: context.url,
    signal: context.signal,
    header: context.requestHeader,
    contextValues: context.values,
    message: input,
  } as UnaryRequest);
  // An interceptor that answered with headers of its own: they are the call's.
  if (response.header !== context.responseHeader) replaceHeaders(context.responseHeader, response.header);
  if (response.trailer !== context.responseTrailer) replaceHeaders(context.responseTrailer, response.trailer);
  return response.message;
}

function replaceHeaders(to: Headers, from: Headers): void {
  for (const key of [...to.keys()]) to.delete(key);
  for (const [key, value] of from) to.set(key, value);
}

/** A call's signal, aborted at its deadline or by whoever holds `cancel`. */
export interface CallSignal {
  signal: AbortSignal;
  /** Aborts the call now (the caller went away): its handler sees Canceled. */
  cancel(): void;
  /** Unlinks the timer and the caller's signal once the call has settled. */
  release(): void;
}

/** When each deadline signal aborts (`performance.now()`), so a call within another can share it. */
const deadlineOf = new WeakMap<AbortSignal, number>();

/**
 * How much later than its own deadline a call may be aborted by its caller's: the deadline a call
 * inherits is counted in whole milliseconds of `Date.now()`.
 */
const SHARED_DEADLINE_SLACK_MS = 2;

/** A call that shares its caller's signal: the signal is the caller's to cancel and release. */
const SHARED: Omit<CallSignal, "signal"> = { cancel() {}, release() {} };

/**
 * A call's signal when it has a deadline: aborts with a `TimeoutError` when `timeoutMs` have
 * passed, or with the caller's signal. `release` unlinks both once the call has settled. Why not
 * `AbortSignal.timeout` and `AbortSignal.any`: they tie their signals to the garbage collector
 * (weak references, a timer that outlives the call), which made them the largest cost of a call
 * after the handler itself; a call knows when it ends, so it can simply undo its links.
 *
 * A call made with its caller's signal that aborts by the same deadline (a handler's call that
 * inherits what is left of its caller's budget, or the gateway's call, whose signal already
 * carries the deadline) shares that signal: a signal, a timer and a listener fewer per call.
 */
export function signalUntil(timeoutMs: number, caller: AbortSignal | undefined): CallSignal {
  const at = performance.now() + timeoutMs;
  const linked = caller === NEVER_ABORTS ? undefined : caller;
  if (linked) {
    const callerAt = deadlineOf.get(linked);
    if (callerAt !== undefined && callerAt <= at + SHARED_DEADLINE_SLACK_MS) return { signal: linked, ...SHARED };
  }
  return new DeadlineSignal(timeoutMs, at, linked);
}

/**
 * A signal of its own with a timer, linked to the caller's signal if any. A class, not closures:
 * this runs for every call, and its methods and its listener (`handleEvent`) are made once.
 */
class DeadlineSignal implements CallSignal {
  readonly #controller = new AbortController();
  readonly #timer: NodeJS.Timeout;
  readonly #caller: AbortSignal | undefined;
  readonly signal: AbortSignal;

  constructor(timeoutMs: number, at: number, caller: AbortSignal | undefined) {
    this.signal = this.#controller.signal;
    deadlineOf.set(this.signal, at);
    this.#timer = setTimeout(abortAtDeadline, timeoutMs, this.#controller);
    this.#timer.unref();
    this.#caller = caller;
    if (!caller) return;
    if (caller.aborted) this.handleEvent();
    else caller.addEventListener("abort", this, { once: true });
  }

  /** The caller's signal aborted. */
  handleEvent(): void {
    this.#controller.abort(this.#caller!.reason);
  }

  cancel(): void {
    this.#controller.abort(new DOMException("the caller went away", "AbortError"));
  }

  release(): void {
    clearTimeout(this.#timer);
    this.#caller?.removeEventListener("abort", this);
  }
}

function abortAtDeadline(controller: AbortController): void {
  controller.abort(new DOMException("the call's deadline passed", "TimeoutError"));
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
