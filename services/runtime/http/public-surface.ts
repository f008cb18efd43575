import { hasOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type Interceptor, type MethodImpl } from "@connectrpc/connect";
import { http } from "../../../gen/google/api/annotations_pb.js";
import { bodyLimit } from "./body-limits.js";
import { untilAborted } from "./request-context.js";

/**
 * The public surface: only methods with a google.api.http route are served over HTTP (Connect,
 * gRPC, REST). Internal methods (Record, Bootstrap, ResolveIngestToken, ...) trust their caller
 * and travel only over the internal transport, never on the public port.
 */
export function isPublicMethod(method: DescMethod): boolean {
  return hasOption(method, http);
}

/** The internal methods publicOnly registered (as unimplemented); gRPC health and reflection are not among them. */
const internalOnPublicPort = new WeakSet<DescMethod>();

function unimplemented(method: DescMethod) {
  return () => {
    throw new ConnectError(`${method.parent.typeName}.${method.name} has no handler in this process`, Code.Unimplemented);
  };
}

/**
 * The first interceptor of the public port: an internal method is refused as unimplemented before
 * any other interceptor (input validation among them) runs, so its answer says nothing about its
 * input.
 */
export function publicMethodsOnlyInterceptor(): Interceptor {
  return (next) => (req) => {
    if (internalOnPublicPort.has(req.method))
      return Promise.reject(new ConnectError(`${req.method.parent.typeName}.${req.method.name} has no handler in this process`, Code.Unimplemented));
    return next(req);
  };
}

/**
 * Ends a public unary call at its deadline, or when its caller hangs up, whether or not its handler
 * reads the signal: Connect-ES runs a handler of this process to its end and answered 200 after
 * the deadline, where a call forwarded over NATS (and every internal call) already ended at it.
 * The handler is not stopped: work that must finish once started (a delivery, whose answer is kept
 * for its retry) goes on.
 */
export function deadlineInterceptor(): Interceptor {
  return (next) => (req) => (req.stream ? next(req) : untilAborted(next(req), req.signal));
}

/**
 * Registers the public methods one by one, each with its body limit from the table the REST
 * routes use (`readMaxBytes`, counted after decompression); an internal method answers
 * Unimplemented and reads at most the default limit.
 */
export function publicOnly(router: ConnectRouter): ConnectRouter {
  const register = (method: DescMethod, fn: unknown, options?: object) => {
    // The method is known only at run time, so the compiler cannot tie it to its handler's type.
    const impl = (fn !== undefined && isPublicMethod(method) ? fn : unimplemented(method)) as MethodImpl<DescMethod>;
    if (!isPublicMethod(method)) internalOnPublicPort.add(method);
    router.rpc(method, impl, { ...options, readMaxBytes: bodyLimit(method) });
  };
  const wrapper: ConnectRouter = {
    get handlers() {
      return router.handlers;
    },
    service(service: DescService, impl: object, options?: object) {
      for (const method of service.methods) {
        const fn = (impl as Record<string, unknown>)[method.localName];
        register(method, typeof fn === "function" ? fn.bind(impl) : undefined, options);
      }
      return wrapper;
    },
    rpc(method: DescMethod, impl: unknown, options?: object) {
      if (isPublicMethod(method)) register(method, impl, options);
      return wrapper;
    },
  } as ConnectRouter;
  return wrapper;
}
