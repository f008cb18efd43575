import { hasOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { http } from "../../gen/google/api/annotations_pb.js";

/**
 * The public surface: only methods with a google.api.http route are served over HTTP (Connect,
 * gRPC, REST). Internal methods (Record, Bootstrap, ResolveIngestToken, ...) trust their caller
 * and travel only over the internal transport, never on the public port.
 */
export function isPublicMethod(method: DescMethod): boolean {
  return hasOption(method, http);
}

export function publicOnly(router: ConnectRouter): ConnectRouter {
  const wrapper: ConnectRouter = {
    get handlers() {
      return router.handlers;
    },
    service(service: DescService, impl: object, options?: object) {
      const kept: Record<string, unknown> = {};
      for (const method of service.methods) {
        const fn = (impl as Record<string, unknown>)[method.localName];
        if (fn !== undefined && isPublicMethod(method)) kept[method.localName] = fn;
      }
      router.service(service, kept as never, options as never);
      return wrapper;
    },
    rpc(method: DescMethod, impl: unknown, options?: object) {
      if (isPublicMethod(method)) router.rpc(method as never, impl as never, options as never);
      return wrapper;
    },
  } as ConnectRouter;
  return wrapper;
}
