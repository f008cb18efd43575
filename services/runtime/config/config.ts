import { z } from "zod";
import { databaseUrlProblem, unaskedEmbeddedDatabaseProblem } from "../data/database-url.js";
import { natsCredentialProblem } from "../transport/nats-connection.js";

// One schema for every process, so the deployment manifests can be checked against it.
const cidrList = z
  .string()
  .default("")
  .transform((value, ctx) => {
    const entries = value
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean);
    for (const entry of entries) {
      if (!/^[0-9a-fA-F:.]+\/\d{1,3}$/.test(entry)) {
        ctx.addIssue({ code: "custom", message: `"${entry}" is not a CIDR range (e.g. 10.0.0.0/8)` });
      }
    }
    return entries;
  });

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === "" ? undefined : v));

export const configSchema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().default("0.0.0.0"),
  // Prometheus metrics are served here (GET /metrics) and never on PORT; unset = not served.
  METRICS_PORT: z.coerce.number().int().min(0).max(65535).optional(),
  PUBLIC_URL: optionalString,
  DATABASE_URL: optionalString,
  DATA_DIR: z.string().default("./.data"),
  DATABASE_POOL_SIZE: z.coerce.number().int().min(1).max(200).default(10),
  // With replicas, the migrations run once per upgrade (a Job or `migrate.js`) and "false" here.
  MIGRATE_ON_START: z
    .enum(["true", "false", ""])
    .default("true")
    .transform((v) => v !== "false"),
  // With NATS_URL (or a misspelled DATABASE_URL) set and no DATABASE_URL, the embedded Postgres is
  // refused at start unless this is "true": a process that lost its DATABASE_URL would otherwise
  // keep its data apart from every other.
  DATABASE_EMBEDDED: z
    .enum(["true", "false", ""])
    .default("false")
    .transform((v) => v === "true"),
  NATS_URL: optionalString,
  // NATS credentials (one kind at most) and TLS; see docs/SECURITY.md.
  NATS_USER: optionalString,
  NATS_PASSWORD: optionalString,
  NATS_TOKEN: optionalString,
  NATS_NKEY_SEED: optionalString,
  NATS_CREDS_FILE: optionalString,
  NATS_TLS_CA_FILE: optionalString,
  NATS_TLS_CERT_FILE: optionalString,
  NATS_TLS_KEY_FILE: optionalString,
  // A NATS that lets anyone connect lets anyone call every internal method (Bootstrap among them):
  // such a server is refused at start unless this is "true" (development and tests only).
  NATS_ALLOW_UNAUTHENTICATED: z
    .enum(["true", "false", ""])
    .default("false")
    .transform((v) => v === "true"),
  // Put before every subject (and the stream's name), so installations can share one NATS.
  NATS_SUBJECT_PREFIX: z
    .string()
    .default("")
    .refine((v) => v === "" || /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(v), "must be NATS subject tokens of letters, digits, - and _ separated by dots"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  BOOTSTRAP_ORG_SLUG: optionalString,
  BOOTSTRAP_OWNER_EMAIL: optionalString,
  BOOTSTRAP_OWNER_PASSWORD: optionalString,
  // scrypt's cost (N) for new password hashes (services/identity/passwords.ts): a power of two from
  // 2^14 (the scrypt paper's figure for interactive logins) to 2^20.
  PASSWORD_SCRYPT_N: z.coerce
    .number()
    .int()
    .min(16_384)
    .max(1_048_576)
    .refine((n) => (n & (n - 1)) === 0, "must be a power of two (16384, 32768, 65536, 131072, ...)")
    .default(131_072),
  SESSION_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(30 * 86400)
    .default(12 * 3600),
  HEARTBEAT_SWEEP_SECONDS: z.coerce.number().positive().max(86400).default(300),
  ESCALATION_SWEEP_SECONDS: z.coerce.number().positive().max(3600).default(30),
  // Most time one bulk action call spends acting on incidents, kept below the gateway's call timeout;
  // a caller's shorter deadline shortens it (services/incidents/bulk.ts).
  BULK_ACTION_BUDGET_SECONDS: z.coerce.number().positive().max(12).default(10),
  EGRESS_ALLOW_PRIVATE_CIDRS: cidrList,
  EGRESS_CA_FILE: optionalString,
  // Budget of one chat-webhook post (resolve, connect, TLS, answer), kept below the gateway's call timeout.
  CHAT_WEBHOOK_TIMEOUT_SECONDS: z.coerce.number().positive().max(12).default(10),
  // Event subscriptions (services/subscriptions/README.md): one delivery's budget, the waits
  // between retries (seconds, comma-separated; after the last the delivery has failed), how long a
  // subscription may fail before it is disabled, and how many deliveries to one subscription may be
  // in flight at once.
  SUBSCRIPTION_TIMEOUT_SECONDS: z.coerce.number().positive().max(30).default(10),
  SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: z
    .string()
    .default("5,30,120,300,900,1800,3600,7200,14400,21600,28800")
    .transform((value, ctx) => {
      const waits = value.split(",").map((s) => Number(s.trim()));
      if (waits.length === 0 || waits.some((w) => !Number.isFinite(w) || w <= 0)) {
        ctx.addIssue({ code: "custom", message: "must be positive numbers of seconds, comma-separated" });
      }
      return waits;
    }),
  SUBSCRIPTION_DISABLE_AFTER_SECONDS: z.coerce
    .number()
    .positive()
    .default(3 * 86400),
  SUBSCRIPTION_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(4),
  // Fair shares of each intake process's deliveries (see services/intake/README.md): one
  // organization's in flight, all in flight, how long one waits for room, and how many may wait.
  INTAKE_ORG_IN_FLIGHT: z.coerce.number().int().min(1).max(10_000).default(16),
  INTAKE_IN_FLIGHT: z.coerce.number().int().min(1).max(100_000).default(128),
  INTAKE_SHARE_WAIT_MS: z.coerce.number().int().min(0).max(60_000).default(2_000),
  INTAKE_MAX_WAITING: z.coerce.number().int().min(0).max(1_000_000).default(1_000),
  // Worker threads that parse and map custom-source bodies over 64 KiB off the event loop; 0: on it.
  INTAKE_LARGE_BODY_WORKERS: z.coerce.number().int().min(0).max(64).default(1),
  // Bytes of bodies over 64 KiB handled a second per organization (large-body-budget.ts); 0: no budget.
  INTAKE_LARGE_BODY_BYTES_PER_SECOND: z.coerce
    .number()
    .int()
    .min(0)
    .default(8 * 1024 * 1024),
  // Bytes of read delivery bodies each gateway process holds while they are handled (a quarter per
  // client address); at least 4 MiB, so one address's part takes the largest body (1 MiB).
  GATEWAY_DELIVERY_BYTES: z.coerce
    .number()
    .int()
    .min(4 * 1024 * 1024)
    .max(16 * 1024 * 1024 * 1024)
    .default(64 * 1024 * 1024),
  // Delivery bodies being read at once (before any delivery slot is taken): over the process, per
  // client address, per HTTP/2 connection; past each, 429/503 with Retry-After at once. See docs/SECURITY.md.
  DELIVERY_BODY_READS: z.coerce.number().int().min(1).max(1_000_000).default(512),
  DELIVERY_BODY_READS_PER_ADDRESS: z.coerce.number().int().min(1).max(1_000_000).default(32),
  DELIVERY_BODY_READS_PER_CONNECTION: z.coerce.number().int().min(1).max(100).default(16),
  REMOTE_SOURCE_DENY_CIDRS: cidrList,
  // Loopback, link-local or other non-default ranges remote sources may be on (their own list, not the chat webhook's).
  REMOTE_SOURCE_ALLOW_CIDRS: cidrList,
  // Days an investigation's evidence and settled runs are kept (each incident's newest run stays).
  INVESTIGATION_RETENTION_DAYS: z.coerce.number().int().min(1).max(36_500).default(90),
  // Days a grouping generation no delivery has used is kept.
  GROUPING_GENERATION_RETENTION_DAYS: z.coerce.number().int().min(1).max(36_500).default(90),
  // Host names a remote source's bearer token may be sent to over plain http (never by default).
  REMOTE_SOURCE_HTTP_BEARER_HOSTS: z
    .string()
    .default("")
    .transform((v) =>
      v
        .split(",")
        .map((h) => h.trim().toLowerCase())
        .filter(Boolean),
    ),
  // Keys that encrypt secrets at rest (webhook URLs, remote-source credentials):
  // "<id>:<base64 of 32 bytes>" entries separated by commas; the first one encrypts.
  SECRETS_KEYS: optionalString,
  // Peers whose X-Forwarded-For is believed (load balancers, ingress); without it, the socket's address.
  TRUSTED_PROXY_CIDRS: cidrList,
  SHUTDOWN_GRACE_SECONDS: z.coerce.number().min(0).max(300).default(10),
  // Deadlines of every connection to PORT (and METRICS_PORT), phase by phase; see docs/SECURITY.md.
  HTTP_FIRST_BYTE_TIMEOUT_SECONDS: z.coerce.number().positive().max(600).default(10),
  HTTP_HEADERS_TIMEOUT_SECONDS: z.coerce.number().positive().max(600).default(20),
  HTTP_BODY_TIMEOUT_SECONDS: z.coerce.number().positive().max(3600).default(60),
  HTTP_KEEPALIVE_TIMEOUT_SECONDS: z.coerce.number().positive().max(3600).default(65),
  HTTP2_IDLE_TIMEOUT_SECONDS: z.coerce.number().positive().max(3600).default(65),
  // While an answer waits on the client: longest time between two writes that make progress.
  HTTP_SEND_TIMEOUT_SECONDS: z.coerce.number().positive().max(3600).default(60),
  // Answer bytes one connection may have waiting on its client before it is closed.
  HTTP_MAX_BUFFERED_RESPONSE_BYTES: z.coerce
    .number()
    .int()
    .min(64 * 1024)
    .default(16 * 1024 * 1024),
  // Connections held at once (default: from the open-file limit) and per client address (trusted proxies exempt).
  HTTP_MAX_CONNECTIONS: z.coerce.number().int().min(1).optional(),
  HTTP_MAX_CONNECTIONS_PER_ADDRESS: z.coerce.number().int().min(1).default(256),
});

export type Config = z.infer<typeof configSchema> & { publicUrl: string };

export class ConfigError extends Error {
  override name = "ConfigError";
}

/** Validates the environment once; a bad value names the variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = configSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join(".")}: ${issue.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join("\n")}`);
  }
  const config = parsed.data;
  const bootstrap = [config.BOOTSTRAP_ORG_SLUG, config.BOOTSTRAP_OWNER_EMAIL, config.BOOTSTRAP_OWNER_PASSWORD];
  if (bootstrap.some(Boolean) && !bootstrap.every(Boolean)) {
    throw new ConfigError("invalid configuration:\n  BOOTSTRAP_ORG_SLUG, BOOTSTRAP_OWNER_EMAIL and BOOTSTRAP_OWNER_PASSWORD must be set together");
  }
  const natsProblem = natsCredentialProblem(config);
  if (natsProblem) throw new ConfigError(`invalid configuration:\n  ${natsProblem}`);
  const databaseProblem = config.DATABASE_URL === undefined ? undefined : databaseUrlProblem(config.DATABASE_URL);
  if (databaseProblem) throw new ConfigError(`invalid configuration:\n  ${databaseProblem}`);
  const fallbackProblem = unaskedEmbeddedDatabaseProblem(config, env);
  if (fallbackProblem) throw new ConfigError(`refusing to start: ${fallbackProblem}`);
  const publicUrl = (config.PUBLIC_URL ?? `http://localhost:${config.PORT}`).replace(/\/+$/, "");
  return { ...config, publicUrl };
}

export type ConfigVariable = keyof typeof configSchema.shape;

/**
 * What each variable does, as the configuration reference (docs/reference/configuration.md) shows it (`npm run config-table`
 * writes the table from the schema and these; its --check fails on a variable without one). The
 * default column comes from the schema itself.
 */
export const configDescriptions: { readonly [K in ConfigVariable]?: string } = {
  PORT: "HTTP/1.1 and cleartext HTTP/2 (REST, Connect, gRPC)",
  HOST: "listen address",
  METRICS_PORT: "serves Prometheus `GET /metrics` on this port only (never on `PORT`); unset = no metrics",
  PUBLIC_URL: "base of `workspaceUrl` links and ping URLs; unset = `http://localhost:$PORT`",
  DATABASE_URL:
    "Postgres server; unset = embedded Postgres in `DATA_DIR`. Percent-encode the user name and password (`/` as `%2F`, `#` as `%23`): a malformed URL is refused at start, naming the part, never printing it",
  DATA_DIR: "embedded database and locally generated keys",
  DATABASE_POOL_SIZE: "connections per process for requests (background work has 2 more of its own)",
  MIGRATE_ON_START:
    "`true` applies this version's database migrations as a process starts (an advisory lock makes replicas apply each once); `false` leaves them to `node dist/services/process/migrate.js` (the migration Job) and refuses to start, naming them, while any is missing ([docs/OPERATIONS.md](docs/OPERATIONS.md#upgrading-and-rolling-back))",
  DATABASE_EMBEDDED:
    "`true` runs the embedded Postgres even though `NATS_URL` (or a misspelling of `DATABASE_URL`) is set; without it such a process with no `DATABASE_URL` refuses to start",
  NATS_URL:
    "NATS 2.10 or later with JetStream; unset = in-memory transport and events. A server older than 2.9.4 is refused at start, one before 2.10 warned about ([docs/OPERATIONS.md](docs/OPERATIONS.md#the-nats-servers-version))",
  NATS_USER: "NATS user name, with `NATS_PASSWORD` (one kind of credential at most; [docs/SECURITY.md](docs/SECURITY.md))",
  NATS_PASSWORD: "NATS password, with `NATS_USER`",
  NATS_TOKEN: "NATS token",
  NATS_NKEY_SEED: "NATS NKey seed",
  NATS_CREDS_FILE: "NATS credentials file (JWT and seed)",
  NATS_TLS_CA_FILE: "CA (PEM) the NATS server's certificate is checked against",
  NATS_TLS_CERT_FILE: "client certificate (PEM) for NATS, with `NATS_TLS_KEY_FILE`",
  NATS_TLS_KEY_FILE: "the client certificate's private key (PEM)",
  NATS_ALLOW_UNAUTHENTICATED:
    "`true` lets a process use a NATS server that asks for no credentials (development and tests only; a warning is logged at every start); otherwise such a server is refused at start",
  NATS_SUBJECT_PREFIX: "prefix of every NATS subject and of the stream's name, so installations can share one NATS",
  LOG_LEVEL: "`fatal` … `trace`, `silent`",
  BOOTSTRAP_ORG_SLUG: "the first organization, created once at start (with the two below: all three or none)",
  BOOTSTRAP_OWNER_EMAIL: "its owner's email",
  BOOTSTRAP_OWNER_PASSWORD: "its owner's password, used only when the organization does not exist yet",
  PASSWORD_SCRYPT_N:
    "scrypt's cost for new password hashes: a power of two from 16384 to 1048576. The default (2^17, OWASP's recommendation) takes about 128 MiB and a few hundred milliseconds a hash; a lower one makes logins cheaper and stored hashes cheaper to guess offline. Hashes made with another cost still verify, and are remade with this one at the next login ([docs/SECURITY.md](docs/SECURITY.md))",
  SESSION_TTL_SECONDS: "session token lifetime",
  HEARTBEAT_SWEEP_SECONDS: "silence sweep interval",
  ESCALATION_SWEEP_SECONDS:
    "how often the incident core looks for passed acknowledgement deadlines (escalation steps); a step is emitted at most this long after its deadline",
  BULK_ACTION_BUDGET_SECONDS:
    "most time one bulk action call spends acting on incidents (at most 12); a caller's shorter deadline shortens it. Then it answers with what it did and how to continue ([docs/how-to/respond-to-incidents.md](docs/how-to/respond-to-incidents.md#act-on-many-incidents-at-once))",
  EGRESS_ALLOW_PRIVATE_CIDRS: "private ranges outbound chat-webhook calls may reach (on-premises chat servers)",
  EGRESS_CA_FILE: "extra CA (PEM) trusted for outbound calls",
  CHAT_WEBHOOK_TIMEOUT_SECONDS: "how long a post to the chat webhook may take (at most 12)",
  SUBSCRIPTION_TIMEOUT_SECONDS: "how long one event subscription delivery may take (at most 30)",
  SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: "waits between delivery attempts (less up to 20 % jitter, or a longer `Retry-After`); never beyond 24 h after the event",
  SUBSCRIPTION_DISABLE_AFTER_SECONDS: "a subscription whose every attempt failed this long is disabled",
  SUBSCRIPTION_CONCURRENCY: "deliveries in flight per subscription, over every replica",
  INTAKE_ORG_IN_FLIGHT: "deliveries of one organization an intake process handles at once ([services/intake/README.md](services/intake/README.md))",
  INTAKE_IN_FLIGHT: "deliveries of all organizations an intake process handles at once",
  INTAKE_SHARE_WAIT_MS: "how long a delivery waits for room in its organization's share before 503 with `Retry-After`",
  INTAKE_MAX_WAITING: "deliveries that may wait for room at once; past it, 503 with `Retry-After` at once",
  INTAKE_LARGE_BODY_WORKERS:
    "worker threads per intake process that parse, keep and map custom-source bodies over 64 KiB, and run the rules of previews and grouping overrides over payloads that large, so a large body never holds the event loop other organizations' deliveries wait on; `0` does that work on the event loop ([docs/SECURITY.md](docs/SECURITY.md))",
  INTAKE_LARGE_BODY_BYTES_PER_SECOND:
    'bytes of bodies over 64 KiB an intake process handles a second for each organization: each such body waits its turn (evenly spaced, first come first served) before it is parsed; one whose turn is further away than `INTAKE_SHARE_WAIT_MS` gets the route\'s "try again" answer with `Retry-After` (metric reason `large-bodies`). Ordinary alerts are never charged. `0`: no budget ([docs/SECURITY.md](docs/SECURITY.md))',
  GATEWAY_DELIVERY_BYTES:
    "bytes of read delivery bodies each gateway process holds while their deliveries are handled, a quarter of it per client address; past it 503/429 with `Retry-After: 1` (metric reason `memory`). A memory bound only: deliveries in flight are bounded by intake, once the credential is checked (`INTAKE_IN_FLIGHT`)",
  REMOTE_SOURCE_DENY_CIDRS: "ranges remote sources may not be on",
  REMOTE_SOURCE_ALLOW_CIDRS:
    "private (RFC 1918, CGNAT, IPv6 ULA), loopback, link-local or other refused ranges remote sources may be on; by default a remote source must be on a public address (the chat webhook's `EGRESS_ALLOW_PRIVATE_CIDRS` does not apply to them)",
  INVESTIGATION_RETENTION_DAYS:
    "days an investigation's evidence, and its settled runs, are kept; each incident's newest run stays (without its evidence) so a re-run is numbered after it. Deleted by a sweep in every process (every 10 minutes, 1,000 rows a statement)",
  GROUPING_GENERATION_RETENTION_DAYS: 'days a grouping generation no delivery has used is kept (see "Grouping")',
  REMOTE_SOURCE_HTTP_BEARER_HOSTS:
    "host names a remote source's bearer token may be sent to over plain `http://`; otherwise a bearer token needs an `https` baseUrl",
  SECRETS_KEYS:
    "`<id>:<base64 32 bytes>,…` keys encrypting secrets at rest; the first encrypts, all decrypt (rotation). Required with `DATABASE_URL` (the service refuses to start without it); with the embedded database, unset = a key generated once in `DATA_DIR/secrets.key`",
  TRUSTED_PROXY_CIDRS: "proxies whose `X-Forwarded-For` names the client (limits, audit); otherwise the socket's address",
  SHUTDOWN_GRACE_SECONDS: "how long SIGTERM waits for in-flight requests; the process exits within this + 5 s whatever hangs",
  HTTP_FIRST_BYTE_TIMEOUT_SECONDS: "a connection that sends nothing for this long after it opens is closed",
  HTTP_HEADERS_TIMEOUT_SECONDS: "time to send a request's headers (and the HTTP/2 preface)",
  HTTP_BODY_TIMEOUT_SECONDS: "time to send a whole request, body included",
  HTTP_KEEPALIVE_TIMEOUT_SECONDS: "HTTP/1.1 idle time between requests",
  HTTP2_IDLE_TIMEOUT_SECONDS: "HTTP/2 (gRPC) session idle time with no open stream",
  HTTP_SEND_TIMEOUT_SECONDS: "while an answer waits on a client, the longest time between two writes that make progress; then the connection is closed",
  HTTP_MAX_BUFFERED_RESPONSE_BYTES: "answer bytes one connection may have waiting on its client before it is closed",
  HTTP_MAX_CONNECTIONS:
    "connections held at once; unset = ¾ of the open-file limit (`ulimit -n`), less 64. Past it `503` with `Retry-After`, probes served from a reserve",
  HTTP_MAX_CONNECTIONS_PER_ADDRESS: "connections one client address may hold (trusted proxies exempt)",
  DELIVERY_BODY_READS_PER_ADDRESS:
    "delivery bodies one client address may have arriving at once, on every surface; past it 429/503 (`resource_exhausted` over Connect, gRPC) with `Retry-After: 1`, the body unread",
  DELIVERY_BODY_READS_PER_CONNECTION:
    "delivery bodies one HTTP/2 connection may have arriving at once, in streams (trusted proxies exempt); past it the same answer",
  DELIVERY_BODY_READS:
    "delivery bodies arriving at once over every sender (each held in memory up to its route's limit); past it 503/429 (`unavailable`) with `Retry-After: 1`",
};
