import { create, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { type Unprocessable, UnprocessableSchema } from "../../gen/warroom/errors/v1/errors_pb.js";
import type { Logger } from "./observability/logger.js";

/** A typed error detail, as ConnectError carries it. */
export interface ErrorDetail<Desc extends DescMessage = DescMessage> {
  desc: Desc;
  value: MessageShape<Desc>;
}

/**
 * Domain errors: a stable name and the Connect code it maps to. Handlers throw these; one
 * interceptor turns them into ConnectErrors, and anything else into an opaque Internal error whose
 * detail stays in the log. Messages must never carry a secret.
 */
export class DomainError extends Error {
  constructor(
    readonly code: Code,
    message: string,
    readonly metadata: Record<string, string> = {},
    readonly details: ErrorDetail[] = [],
  ) {
    super(message);
    this.name = new.target.name;
  }
}

export class InvalidArgumentError extends DomainError {
  constructor(message: string) {
    super(Code.InvalidArgument, message);
  }
}

/**
 * A body the endpoint cannot act on: InvalidArgument carrying an `Unprocessable` detail, which the
 * REST gateway answers with HTTP 422. `details` says why, when the message is one the spec fixes
 * (e.g. "Unrecognized trigger payload").
 */
export class UnprocessablePayloadError extends DomainError {
  constructor(message: string, details?: string, metadata: Record<string, string> = {}) {
    super(Code.InvalidArgument, message, metadata, [unprocessableDetail(details)]);
  }
}

export function unprocessableDetail(details = ""): ErrorDetail<typeof UnprocessableSchema> {
  return { desc: UnprocessableSchema, value: create(UnprocessableSchema, { details }) };
}

/** The `Unprocessable` detail of an error (a DomainError thrown here, or a ConnectError received), if it has one. */
export function unprocessableOf(err: unknown): Unprocessable | undefined {
  if (err instanceof DomainError) return err.details.find((d) => d.desc === UnprocessableSchema)?.value as Unprocessable | undefined;
  if (err instanceof ConnectError) return err.findDetails(UnprocessableSchema)[0];
  return undefined;
}

export class UnauthenticatedError extends DomainError {
  constructor(message = "authentication required") {
    super(Code.Unauthenticated, message);
  }
}

export class PermissionDeniedError extends DomainError {
  constructor(message = "your role does not allow this") {
    super(Code.PermissionDenied, message);
  }
}

export class NotFoundError extends DomainError {
  constructor(message = "not found") {
    super(Code.NotFound, message);
  }
}

export class AlreadyExistsError extends DomainError {
  constructor(message: string) {
    super(Code.AlreadyExists, message);
  }
}

/** The resource's state rules the operation out (an archived incident cannot be resolved): HTTP 409. */
export class FailedPreconditionError extends DomainError {
  constructor(message: string) {
    super(Code.FailedPrecondition, message);
  }
}

/** A precondition on the resource's state does not hold (stale version, not yet approved). */
export class ConflictError extends DomainError {
  constructor(message: string) {
    super(Code.Aborted, message);
  }
}

export class RateLimitedError extends DomainError {
  constructor(message: string, retryAfterSeconds: number) {
    super(Code.ResourceExhausted, message, { "retry-after": String(Math.max(1, Math.ceil(retryAfterSeconds))) });
  }
}

/**
 * Seconds a caller is asked to wait before retrying a call that met a "try again" condition
 * (Postgres overloaded or restarting, a serialization failure, a peer not answering): short, since
 * these pass in moments, and the same everywhere so a storm's retries spread out alike.
 */
export const RETRY_AFTER_SECONDS = 2;

/** Unavailable with `retry-after`: every "try again" answer carries it (HTTP Retry-After, gRPC and Connect metadata). */
export function unavailable(message = "unavailable"): ConnectError {
  return new ConnectError(message, Code.Unavailable, { "retry-after": String(RETRY_AFTER_SECONDS) });
}

export class UnavailableError extends DomainError {
  constructor(message = "unavailable") {
    super(Code.Unavailable, message, { "retry-after": String(RETRY_AFTER_SECONDS) });
  }
}

/**
 * The ConnectError a handler's failure is answered with: a domain error keeps its code and message,
 * a transient database or network failure becomes Unavailable, anything else is logged and
 * Internal.
 */
export function toConnectError(err: unknown, logger: Logger, method: string): ConnectError {
  if (err instanceof DomainError) {
    return new ConnectError(err.message, err.code, err.metadata, err.details);
  }
  if (err instanceof ConnectError) {
    if (err.code === Code.Unavailable && !err.metadata.has("retry-after")) err.metadata.set("retry-after", String(RETRY_AFTER_SECONDS));
    return err;
  }
  // Database and network failures are worth a retry by the caller; everything else is a bug.
  if (isTransientFailure(err)) {
    logger.warn({ err, method }, "dependency unavailable");
    return unavailable();
  }
  logger.error({ err, method }, "unhandled error");
  return new ConnectError("internal error", Code.Internal);
}

/**
 * Whether a failure is a "try again" condition: the same call may well succeed in a moment.
 * Looks through `cause` and an AggregateError's errors (a connect attempt to several addresses).
 */
export function isTransientFailure(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 4) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string" && isTransientCode(code)) return true;
  if (err instanceof AggregateError && err.errors.some((e) => isTransientFailure(e, depth + 1))) return true;
  return isTransientFailure((err as { cause?: unknown }).cause, depth + 1);
}

const TRANSIENT_NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "EAI_AGAIN",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
]);

function isTransientCode(code: string): boolean {
  return (
    TRANSIENT_NETWORK_CODES.has(code) ||
    code.startsWith("08") || // connection exceptions
    code.startsWith("53") || // insufficient resources: 53300 too many clients, 53200 out of memory, 53100 disk full, 53400 a configured limit
    code.startsWith("57P") || // admin or crash shutdown, cannot connect now (starting up or recovering)
    code === "40001" || // serialization failure: the transaction may succeed when run again
    code === "40P01" || // deadlock detected: one side was chosen to fail and may run again
    code === "55P03" || // lock not available (lock_timeout)
    code === "55006" // object in use (a database being dropped or created meanwhile)
  );
}

/** Maps errors to Connect codes, and logs each call (debug) with its request id. */
export function errorInterceptor(logger: Logger): Interceptor {
  // The level is set once, at start: a served call builds its debug line only when it is written.
  const debug = logger.isLevelEnabled("debug");
  // Chained with then rather than awaited: no async function's promise and await per call (with
  // AsyncLocalStorage on, each is a promise hook more).
  return (next) => (req) => {
    const started = performance.now();
    let answer: ReturnType<typeof next>;
    try {
      answer = next(req);
    } catch (err) {
      return Promise.reject(servedError(err, req, started, logger));
    }
    if (!debug) {
      return answer.catch((err: unknown) => {
        throw servedError(err, req, started, logger);
      });
    }
    return answer.then(
      (res) => {
        logger.debug({ method: `${req.service.typeName}/${req.method.name}`, ms: Math.round(performance.now() - started) }, "rpc served");
        return res;
      },
      (err: unknown) => {
        throw servedError(err, req, started, logger);
      },
    );
  };
}

/** A served call's failure as the Connect error it answers, logged (debug). */
function servedError(err: unknown, req: { service: { typeName: string }; method: { name: string } }, started: number, logger: Logger): ConnectError {
  const method = `${req.service.typeName}/${req.method.name}`;
  const connectError = toConnectError(err, logger, method);
  logger.debug({ method, ms: Math.round(performance.now() - started), code: Code[connectError.code] }, "rpc failed");
  return connectError;
}
