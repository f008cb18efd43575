import { Code, type ConnectError } from "@connectrpc/connect";
import type { DescMethod } from "@bufbuild/protobuf";
import { RETRY_AFTER_SECONDS, unprocessableOf } from "../runtime/errors.js";
import { dropinErrorAnswer, dropinSuccessStatus } from "./dropin-answers.js";

/**
 * What the HTTP annotations cannot say: status codes chosen by outcome, and the error answers the
 * spec fixes for particular routes. Everything else follows the gRPC-to-HTTP convention.
 */

const TRIGGER_METHODS = new Set([
  "warroom.intake.v1.IntakeService.Deliver",
  "warroom.intake.v1.IntakeService.DeliverAlertRouter",
  "warroom.intake.v1.IntakeService.DeliverChat",
  "warroom.intake.v1.IntakeService.DeliverCustomSource",
  "warroom.intake.v1.IntakeService.DeliverCustomSourceWithPathSecret",
]);
const CHAT_RECEIVER = "warroom.intake.v1.IntakeService.DeliverChat";
const ALERT_ROUTER_RECEIVER = "warroom.intake.v1.IntakeService.DeliverAlertRouter";

/** Methods that create a resource answer 201 Created. */
const CREATES = /^(Register|Add|Create|Draft)[A-Z]/;

/** The key the answer rules are written under: `<full service name>.<method name>`. */
export function methodKey(method: DescMethod): string {
  return `${method.parent.typeName}.${method.name}`;
}

/**
 * The HTTP status of a successful REST answer: the spec's 201/202 for triggers and creations, 204
 * for an empty answer, the drop-in vendor's status, else 200.
 */
export function successStatus(method: DescMethod, body: unknown): number {
  const key = methodKey(method);
  const dropin = dropinSuccessStatus(key);
  if (dropin !== undefined) return dropin;
  if (TRIGGER_METHODS.has(key)) {
    const opened = (body as { outcome?: string }).outcome === "opened";
    if (!opened) return 200;
    return key === ALERT_ROUTER_RECEIVER ? 202 : 201;
  }
  if (method.output.typeName === "google.protobuf.Empty") return 204;
  return CREATES.test(method.name) ? 201 : 200;
}

const CODE_TO_STATUS: Record<Code, number> = {
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 409,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
};

export interface ErrorAnswer {
  status: number;
  body: { error: string; details?: unknown } | unknown;
  headers: Record<string, string>;
}

/**
 * The REST answer (status, JSON body, headers) for a failed call: the Connect code mapped to HTTP,
 * in the drop-in vendor's shape where the route is one.
 */
export function errorAnswer(
  method: DescMethod | undefined,
  err: ConnectError,
  context: { requestId: string; took: number } = { requestId: "", took: 0 },
): ErrorAnswer {
  const key = method ? methodKey(method) : "";
  // Every "try again" answer says when: an Unavailable from a peer or the transport (no replica
  // answering) carries no retry-after of its own.
  // A deadline that passed (504) is one too: the work may still finish, and a retry with the same
  // Idempotency-Key gets its answer.
  if ((err.code === Code.Unavailable || err.code === Code.DeadlineExceeded) && !err.metadata.has("retry-after"))
    err.metadata.set("retry-after", String(RETRY_AFTER_SECONDS));
  const dropin = dropinErrorAnswer(key, err, context);
  if (dropin) return dropin;
  const headers: Record<string, string> = {};
  const retryAfter = err.metadata.get("retry-after");
  if (retryAfter) headers["retry-after"] = retryAfter;
  let status = CODE_TO_STATUS[err.code] ?? 500;
  let message = err.rawMessage;
  const unprocessable = unprocessableOf(err);
  if (unprocessable) status = 422;
  if (key === CHAT_RECEIVER) {
    // The chat receiver's failures are uniform: the reason goes to the audit log only.
    if (status === 401 || status === 403) return { status: 401, body: { error: "unauthorized" }, headers };
    if (status >= 500) return { status: 503, body: { error: "unavailable" }, headers };
  }
  if (status === 500) message = "internal error";
  const details = unprocessable?.details;
  return { status, body: details ? { error: message, details } : { error: message }, headers };
}
