import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus } from "../../../gen/grpc/health/v1/health_pb.js";
import type { Probes } from "./probes.js";

/** How often Watch re-checks. */
const WATCH_INTERVAL_MS = 1000;

/**
 * The standard grpc.health.v1 service, answering from the same probes as /readyz and /healthz:
 * service "" (the server as a whole) and "readiness" follow /readyz, "liveness" follows /healthz
 * (the process's own, never a dependency's).
 */
export function registerGrpcHealth(router: ConnectRouter, probes: Probes): void {
  const status = async (service: string) => {
    let ok: boolean;
    if (service === "liveness") ok = probes.liveness().ok;
    else if (service === "" || service === "readiness")
      ok = await probes.readiness().then(
        (r) => r.ok,
        () => false,
      );
    else throw new ConnectError(`unknown service "${service}"`, Code.NotFound);
    return ok ? HealthCheckResponse_ServingStatus.SERVING : HealthCheckResponse_ServingStatus.NOT_SERVING;
  };
  router.service(Health, {
    async check(req) {
      return { status: await status(req.service) };
    },
    async *watch(req, context) {
      let last: HealthCheckResponse_ServingStatus | undefined;
      while (!context.signal.aborted) {
        const current = await status(req.service);
        if (current !== last) {
          last = current;
          yield { status: current };
        }
        await new Promise((resolve) => setTimeout(resolve, WATCH_INTERVAL_MS));
      }
    },
  });
}
