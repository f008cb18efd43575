import { z } from "zod";
import { databaseUrlProblem } from "./database-url.js";
import { natsCredentialProblem } from "./nats-connection.js";

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
  SESSION_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(30 * 86400)
    .default(12 * 3600),
  HEARTBEAT_SWEEP_SECONDS: z.coerce.number().positive().max(86400).default(300),
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
  // Deliveries each gateway process admits at once; past it, 503/429 with Retry-After at once.
  GATEWAY_DELIVERIES_IN_FLIGHT: z.coerce.number().int().min(1).max(1_000_000).default(256),
  REMOTE_SOURCE_DENY_CIDRS: cidrList,
  // Loopback, link-local or other non-default ranges remote sources may be on (their own list, not the chat webhook's).
  REMOTE_SOURCE_ALLOW_CIDRS: cidrList,
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
  // Connections held at once (default: from the open-file limit) and per client address (trusted proxies exempt).
  HTTP_MAX_CONNECTIONS: z.coerce.number().int().min(1).optional(),
  HTTP_MAX_CONNECTIONS_PER_ADDRESS: z.coerce.number().int().min(1).default(256),
  // /healthz turns 503 (wedged) once a database ping has had no answer for this long.
  LIVENESS_STUCK_SECONDS: z.coerce.number().positive().max(3600).default(30),
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
  const publicUrl = (config.PUBLIC_URL ?? `http://localhost:${config.PORT}`).replace(/\/+$/, "");
  return { ...config, publicUrl };
}
