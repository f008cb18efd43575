import type { DescMethod, DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createHandlerContext,
  createServiceImplSpec,
  type ConnectRouter,
  type Interceptor,
  type MethodImplSpec,
  type Transport,
} from "@connectrpc/connect";
import { invokeUnaryImplementation, runUnaryCall } from "@connectrpc/connect/protocol";

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

export function createDirectRegistry(): DirectRegistry {
  const specs = new Map<string, MethodImplSpec>();
  const key = (service: DescService, name: string) => `${service.typeName}/${name}`;
  const router = {
    handlers: [],
    service(service: DescService, impl: object) {
      const spec = createServiceImplSpec(service, impl as never);
      for (const method of service.methods) {
        const methodSpec = spec.methods[method.localName];
        if (methodSpec && (impl as Record<string, unknown>)[method.localName] !== undefined) specs.set(key(service, method.name), methodSpec);
      }
      return router;
    },
    rpc(method: DescMethod, impl: unknown) {
      const spec = createServiceImplSpec(method.parent, { [method.localName]: impl } as never);
      const methodSpec = spec.methods[method.localName];
      if (methodSpec) specs.set(key(method.parent, method.name), methodSpec);
      return router;
    },
  } as unknown as ConnectRouter;
  return { router, lookup: (method) => specs.get(key(method.parent, method.name)) };
}

export function createDirectTransport(
  registry: DirectRegistry,
  options: { serverInterceptors?: Interceptor[]; clientInterceptors?: Interceptor[] } = {},
): Transport {
  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      const path = `/${method.parent.typeName}/${method.name}`;
      const spec = registry.lookup(method);
      if (!spec || spec.kind !== "unary") throw new ConnectError(`no service is answering ${path}`, Code.Unimplemented);
      return runUnaryCall({
        interceptors: options.clientInterceptors,
        signal,
        timeoutMs,
        req: {
          stream: false,
          service: method.parent,
          method,
          requestMethod: "POST",
          url: `direct://${path}`,
          header: new Headers(header),
          contextValues: contextValues ?? createContextValues(),
          message: input,
        },
        next: async (req) => {
          const context = createHandlerContext({
            service: method.parent,
            method,
            protocolName: "direct",
            requestMethod: "POST",
            url: req.url,
            timeoutMs,
            requestSignal: req.signal,
            requestHeader: req.header,
            contextValues: req.contextValues,
          });
          try {
            const message = await invokeUnaryImplementation(spec as never, context, req.message as never, options.serverInterceptors ?? []);
            return { stream: false, service: method.parent, method, header: context.responseHeader, message, trailer: context.responseTrailer } as never;
          } catch (err) {
            // A deadline that passed while the handler ran reads as DeadlineExceeded, as over a network.
            if (req.signal.aborted && ConnectError.from(err).code === Code.Canceled) throw ConnectError.from(req.signal.reason ?? err);
            throw err;
          }
        },
      });
    },
    async stream() {
      throw new ConnectError("streaming RPCs are not carried between services", Code.Unimplemented);
    },
  };
}
