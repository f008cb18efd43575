/**
 * Why an outbound call was refused or failed. Callers map these to their own
 * domain messages; the codes are stable, the messages are for people.
 */
export type EgressErrorReason =
  | "invalid_url"
  | "forbidden_scheme"
  | "forbidden_userinfo"
  | "forbidden_address"
  | "invalid_request"
  | "resolution_failed"
  | "timeout"
  | "tls"
  | "network";

export interface EgressErrorDetails {
  /** The host name of the target; never its path or query, which may carry a secret. */
  host?: string;
  /** A low-level code such as ECONNREFUSED, kept instead of the underlying message. */
  code?: string;
}

/**
 * The only error the egress module throws. Its message is built here from the
 * host alone: a webhook URL's path and query are credentials, so neither the
 * URL nor an underlying library message (which may quote it) is ever included,
 * and the original error is deliberately not attached as `cause`.
 */
export class EgressError extends Error {
  override readonly name = "EgressError";
  readonly reason: EgressErrorReason;
  readonly host: string | undefined;
  readonly code: string | undefined;

  constructor(reason: EgressErrorReason, message: string, details: EgressErrorDetails = {}) {
    super(message);
    this.reason = reason;
    this.host = details.host;
    this.code = details.code;
  }
}

/** Whether a thrown value is an egress refusal or failure, whose message is safe to show. */
export function isEgressError(value: unknown): value is EgressError {
  return value instanceof EgressError;
}
