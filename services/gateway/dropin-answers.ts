import { Code, type ConnectError } from "@connectrpc/connect";

/**
 * The drop-in receivers answer in their vendors' own shapes, so that senders written for
 * PagerDuty's Events API v2 or Opsgenie's Alert API read our answers as theirs. This is the one
 * place those shapes are built; every other route answers `{"error": ...}`.
 *
 * PagerDuty: 202 `{"status":"success","message":"Event processed","dedup_key":...}` (from the
 * handler; v1: 200 with `incident_key`), 400 `{"status":"invalid event","message":"Event object is invalid","errors":[...]}`
 * for anything it refuses, a body over 512 KB included; 429 `throttle event`.
 * Opsgenie: 202 `{"result":"Request will be processed","took":...,"requestId":...}` (from the
 * handler), errors `{"message":...,"took":...,"requestId":...}` with `errors` by field on 422.
 */

const PAGERDUTY_V1 = "warroom.intake.v1.IntakeService.EnqueuePagerDutyV1Event";
const PAGERDUTY = new Set(["warroom.intake.v1.IntakeService.EnqueuePagerDutyEvent", "warroom.intake.v1.IntakeService.EnqueuePagerDutyChange", PAGERDUTY_V1]);
const OPSGENIE_WRITES = new Set([
  "warroom.intake.v1.IntakeService.CreateOpsgenieAlert",
  "warroom.intake.v1.IntakeService.CloseOpsgenieAlert",
  "warroom.intake.v1.IntakeService.AcknowledgeOpsgenieAlert",
]);
const OPSGENIE_STATUS = "warroom.intake.v1.IntakeService.GetOpsgenieRequestStatus";
/** Opsgenie's Heartbeat API ping: 202 with its PONG, and Opsgenie's error shape. */
const OPSGENIE_HEARTBEAT_PING = "warroom.heartbeats.v1.HeartbeatsService.PingOpsgenieHeartbeat";

/** Healthchecks' ping URLs, which answer plain text: `OK`, or a short reason. */
const HEALTHCHECKS_PINGS = new Set(["warroom.heartbeats.v1.HeartbeatsService.PingByKey", "warroom.heartbeats.v1.HeartbeatsService.PingByKeySignal"]);

/** Whether the method answers plain text, as Healthchecks' ping API does, rather than JSON. */
export function isPlainTextMethod(key: string): boolean {
  return HEALTHCHECKS_PINGS.has(key);
}

/**
 * The plain-text answer of a Healthchecks ping URL: 200 `OK`, or the status the code maps to with
 * a short reason; every refusal of a key (unknown, malformed, rotated) is the same 404 `not found`.
 */
export function plainTextAnswer(status: number, message: string): { status: number; text: string } {
  if (status < 300) return { status: 200, text: "OK" };
  if (status === 404) return { status, text: "not found" };
  if (status >= 500) return { status, text: "unavailable; retry" };
  return { status, text: message };
}

export interface DropinAnswer {
  status: number;
  body: unknown;
  headers: Record<string, string>;
}

export interface AnswerContext {
  requestId: string;
  /** Seconds since the request arrived: Opsgenie's `took`. */
  took: number;
}

/**
 * Both vendors answer 202 Accepted to every write they take; the status read and PagerDuty's
 * older Events API v1 answer 200.
 */
export function dropinSuccessStatus(key: string): number | undefined {
  if (key === PAGERDUTY_V1) return 200;
  if (PAGERDUTY.has(key) || OPSGENIE_WRITES.has(key) || key === OPSGENIE_HEARTBEAT_PING) return 202;
  if (key === OPSGENIE_STATUS) return 200;
  return undefined;
}

const INVALID_EVENT = { status: "invalid event", message: "Event object is invalid" } as const;

function pagerDutyInvalid(errors: readonly string[]): DropinAnswer {
  return { status: 400, body: { ...INVALID_EVENT, errors }, headers: {} };
}

function opsgenie(status: number, message: string, context: AnswerContext, extra: Record<string, unknown> = {}): DropinAnswer {
  return { status, body: { message, ...extra, took: context.took, requestId: context.requestId }, headers: {} };
}

/** A body over the route's limit, refused without reading the rest. */
export function dropinTooLarge(key: string, limit: number, context: AnswerContext): DropinAnswer | undefined {
  if (PAGERDUTY.has(key)) return pagerDutyInvalid([`Event object is larger than ${limit / 1024} KB`]);
  if (OPSGENIE_WRITES.has(key) || key === OPSGENIE_HEARTBEAT_PING) return opsgenie(413, `Request body is larger than ${limit} bytes`, context);
  return undefined;
}

function parsedList(value: string | null): string[] | undefined {
  if (!value) return undefined;
  try {
    const list: unknown = JSON.parse(value);
    return Array.isArray(list) ? list.map(String) : undefined;
  } catch {
    return undefined;
  }
}

function parsedRecord(value: string | null): Record<string, string> | undefined {
  if (!value) return undefined;
  try {
    const record: unknown = JSON.parse(value);
    return record !== null && typeof record === "object" && !Array.isArray(record) ? (record as Record<string, string>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The error answer in the vendor's shape (status, body, headers) for a drop-in route's failed call;
 * undefined for any other method.
 */
export function dropinErrorAnswer(key: string, err: ConnectError, context: AnswerContext): DropinAnswer | undefined {
  const retryAfter = err.metadata.get("retry-after");
  const withRetry = (answer: DropinAnswer): DropinAnswer => (retryAfter ? { ...answer, headers: { ...answer.headers, "retry-after": retryAfter } } : answer);
  if (PAGERDUTY.has(key)) {
    switch (err.code) {
      case Code.InvalidArgument:
      case Code.FailedPrecondition:
      case Code.OutOfRange:
        return pagerDutyInvalid(parsedList(err.metadata.get("x-pagerduty-errors")) ?? [err.rawMessage]);
      case Code.Unauthenticated:
      case Code.PermissionDenied:
        return pagerDutyInvalid(["Invalid routing key"]);
      case Code.ResourceExhausted:
        return withRetry({
          status: 429,
          body: { status: "throttle event", message: "Requests for this service are arriving too quickly. Please retry later." },
          headers: {},
        });
      default:
        // 5xx: PagerDuty's senders retry these.
        return withRetry({ status: 503, body: { status: "unavailable", message: "Event could not be processed; retry" }, headers: {} });
    }
  }
  if (OPSGENIE_WRITES.has(key) || key === OPSGENIE_STATUS || key === OPSGENIE_HEARTBEAT_PING) {
    switch (err.code) {
      case Code.InvalidArgument:
      case Code.FailedPrecondition:
      case Code.OutOfRange: {
        const errors = parsedRecord(err.metadata.get("x-opsgenie-errors"));
        return opsgenie(422, "Request body is not processable. Please check the errors.", context, errors ? { errors } : {});
      }
      case Code.Unauthenticated:
      case Code.PermissionDenied:
        return opsgenie(401, "Could not authenticate", context);
      case Code.NotFound:
        return opsgenie(404, err.rawMessage, context);
      case Code.ResourceExhausted:
        return withRetry(opsgenie(429, "You are making too many requests! To avoid errors, we recommend you limit requests.", context));
      default:
        return withRetry(opsgenie(503, "Service is temporarily unavailable; retry", context));
    }
  }
  return undefined;
}
