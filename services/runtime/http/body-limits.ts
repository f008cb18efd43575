import type { DescMethod } from "@bufbuild/protobuf";

/**
 * Request body limits of the public port, one table for REST, Connect and gRPC. The chat
 * receiver's is the spec's; the rest are documented in the README. Over Connect and gRPC the limit
 * counts decompressed bytes: a compressed body is inflated only up to it, then refused.
 */
export const BODY_LIMITS = {
  "warroom.intake.v1.IntakeService.DeliverChat": 256 * 1024,
  // PagerDuty's own limit on an event, which its senders expect to be refused past.
  "warroom.intake.v1.IntakeService.EnqueuePagerDutyEvent": 512 * 1024,
  "warroom.intake.v1.IntakeService.EnqueuePagerDutyV1Event": 512 * 1024,
  "warroom.intake.v1.IntakeService.EnqueuePagerDutyChange": 512 * 1024,
  // 500 ids (the most a call takes) with room to spare: a body past it can hold nothing useful.
  "warroom.incidents.v1.IncidentsService.BulkUpdateIncidents": 64 * 1024,
  default: 1024 * 1024,
} as const;

/**
 * The most bytes a method's request body may have (after decompression): its own limit, or the
 * default.
 */
export function bodyLimit(method: DescMethod): number {
  const key = `${method.parent.typeName}.${method.name}`;
  return (BODY_LIMITS as Record<string, number>)[key] ?? BODY_LIMITS.default;
}

/**
 * The intake methods that take a delivery: the ones a sender's storm sends, whose bodies are read
 * within the body-reading bounds (body-reads.ts) on every surface of the public port, and which the
 * REST gateway holds within its memory bound (GATEWAY_DELIVERY_BYTES) once read.
 */
const DELIVERY_METHOD = /^warroom\.intake\.v1\.IntakeService\.(Deliver[A-Za-z]*|Enqueue[A-Za-z]*|(Create|Close|Acknowledge)OpsgenieAlert)$/;

/** Whether `key` (`<service type name>.<method name>`) names a delivery method. */
export function isDeliveryMethod(key: string): boolean {
  return DELIVERY_METHOD.test(key);
}

/**
 * The delivery method a Connect, gRPC or gRPC-web request path names (`/<service>/<method>`), or
 * undefined for any other path.
 */
export function deliveryMethodOfPath(pathname: string): string | undefined {
  const match = /^\/([\w.]+)\/(\w+)$/.exec(pathname);
  const key = match ? `${match[1]}.${match[2]}` : undefined;
  return key && isDeliveryMethod(key) ? key : undefined;
}
