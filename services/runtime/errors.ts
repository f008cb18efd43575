import { create, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { type Unprocessable, UnprocessableSchema } from "../../gen/warroom/errors/v1/errors_pb.js";
import type { Logger } from "./logger.js";

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

export class UnavailableError extends DomainError {
  constructor(message = "unavailable") {
    super(Code.Unavailable, message);
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
  if (err instanceof ConnectError) return err;
  // Database and network failures are worth a retry by the caller; everything else is a bug.
  if (isTransientFailure(err)) {
    logger.warn({ err, method }, "dependency unavailable");
    return new ConnectError("unavailable", Code.Unavailable);
  }
  logger.error({ err, method }, "unhandled error");
  return new ConnectError("internal error", Code.Internal);
}

function isTransientFailure(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  return (
    typeof code === "string" &&
    (["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "CONNECTION_CLOSED", "CONNECTION_ENDED", "CONNECTION_DESTROYED", "CONNECT_TIMEOUT"].includes(code) ||
      code.startsWith("57P") || // admin shutdown, cannot connect now
      code === "53300" || // too many clients: max_connections or the role's limit used up
      code.startsWith("08")) // connection exceptions
  );
}

/** Maps errors to Connect codes, and logs each call (debug) with its request id. */
export function errorInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    const method = `${req.service.typeName}/${req.method.name}`;
    try {
      const res = await next(req);
      logger.debug({ method, ms: Math.round(performance.now() - started) }, "rpc served");
      return res;
    } catch (err) {
      const connectError = toConnectError(err, logger, method);
      logger.debug({ method, ms: Math.round(performance.now() - started), code: Code[connectError.code] }, "rpc failed");
      throw connectError;
    }
  };
}
