import type { DescMethodUnary, DescService } from "@bufbuild/protobuf";
import type { ConnectRouter, MethodImpl, ServiceImpl, Transport } from "@connectrpc/connect";

/** Protocol headers belong to the incoming call; only the caller's own headers travel on. */
const PROTOCOL_HEADER =
  /^(content-type|content-length|content-encoding|accept-encoding|connection|host|te|keep-alive|transfer-encoding|connect-.*|grpc-.*|:.*)$/i;

function applicationHeaders(incoming: Headers): Headers {
  const out = new Headers();
  incoming.forEach((value, key) => {
    if (!PROTOCOL_HEADER.test(key)) out.set(key, value);
  });
  return out;
}

/**
 * Serves a service that runs elsewhere by passing each call on through the transport: how the
 * gateway process answers Connect and gRPC for services that run as their own processes.
 */
export function registerForwarding<S extends DescService>(router: ConnectRouter, service: S, transport: Transport): void {
  const impl: Record<string, MethodImpl<DescMethodUnary>> = {};
  for (const method of service.methods) {
    if (method.methodKind !== "unary") continue;
    impl[method.localName] = async (req, context) => {
      const response = await transport.unary(method as DescMethodUnary, context.signal, context.timeoutMs(), applicationHeaders(context.requestHeader), req);
      response.header.forEach((value, key) => {
        if (key.startsWith("x-")) context.responseHeader.set(key, value);
      });
      return response.message;
    };
  }
  // The service is known only at run time, so the compiler cannot tie a method to its handler.
  router.service(service, impl as Partial<ServiceImpl<S>>);
}
