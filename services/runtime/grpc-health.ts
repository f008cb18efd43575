import type { ConnectRouter } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";

/** The standard grpc.health.v1 service, answering from the process's readiness. */
export function registerGrpcHealth(router: ConnectRouter, ready: () => Promise<boolean>): void {
  const status = async () =>
    (await ready().catch(() => false)) ? HealthCheckResponse_ServingStatus.SERVING : HealthCheckResponse_ServingStatus.NOT_SERVING;
  router.service(Health, {
    async check() {
      return { status: await status() };
    },
    async *watch(_req, context) {
      let last: HealthCheckResponse_ServingStatus | undefined;
      while (!context.signal.aborted) {
        const current = await status();
        if (current !== last) {
          last = current;
          yield { status: current };
        }
        await new Promise((resolve) => setTimeout(resolve, 5000));
      }
    },
  });
}
