/** The numbers and fixed messages of the remote source protocol, version 1, in one place. */

/** The protocol version this code speaks; a source reporting another major version is refused. */
export const PROTOCOL_VERSION = "1";

/** A read's response above this size is cut to a partial result (spec: Limits, 4 MiB). */
export const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

/**
 * The read budget of one call to a remote source: resolution, connection, TLS, request and the
 * whole response. The spec asks for the budget of the bundled sources, "answers within seconds".
 */
export const READ_BUDGET_MS = 5_000;

/** Request bodies a hosted source accepts (the service's requests are a few hundred bytes). */
export const MAX_REQUEST_BYTES = 1024 * 1024;

/** The `error` of a partial result, word for word as the spec names them. */
export const RESPONSE_TOO_LARGE = "response too large";
export const CREDENTIALS_REJECTED = "credentials rejected";

export const DESCRIPTOR_KINDS = ["metrics", "logs", "changes", "chat"] as const;
export const CANONICAL_ROLES = ["list", "range", "streams"] as const;
export const WINDOW_FORMATS = ["date", "iso", "epoch-s", "epoch-ms", "epoch-ns", "grafana"] as const;
