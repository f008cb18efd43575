import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { allServices } from "../../services/process/all-services.js";
import { registry } from "../../services/runtime/observability/metrics.js";
import { runProcess, type ProcessOptions, type RunningProcess } from "../../services/process/run-process.js";
import { copyTemplate, templateApplies } from "./embedded-template.js";
import { startPrivateNats } from "./nats-server.js";
import { migratedTemplate } from "./template-database.js";
import { tempDataDir } from "./temp-data-dir.js";

/**
 * Which database apps run on unless a test says otherwise: the Postgres server ("server"), or the
 * embedded Postgres of the default mode ("embedded", TEST_DATABASE=embedded), so the end-to-end
 * suites run in both modes.
 */
export type TestDatabase = "server" | "embedded";
export const TEST_DATABASE: TestDatabase = process.env.TEST_DATABASE === "embedded" ? "embedded" : "server";

/** The Postgres server tests create their databases on. */
export const ADMIN_DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
export const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

export const OWNER = { org: "acme", email: "owner@acme.test", password: "correct horse battery" };

/**
 * A fresh database on the test server, dropped by the returned function: empty, or with every
 * service's migrations applied (`migrated`, copied from test/support/template-database.ts).
 */
export async function freshDatabase(options: { migrated?: boolean } = {}): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `wr_test_${randomBytes(6).toString("hex")}`;
  const admin = postgres(ADMIN_DATABASE_URL, { max: 1, onnotice: () => {} });
  try {
    if (!options.migrated) await admin.unsafe(`create database ${name}`);
    else {
      const fromTemplate = async (again: boolean) => admin.unsafe(`create database ${name} template ${await migratedTemplate(ADMIN_DATABASE_URL, again)}`);
      // 3D000: the template is gone (dropped by a run of another checkout): built once more.
      await fromTemplate(false).catch((err: { code?: string }) => (err.code === "3D000" ? fromTemplate(true) : Promise.reject(err)));
    }
  } finally {
    await admin.end();
  }
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const a = postgres(ADMIN_DATABASE_URL, { max: 1, onnotice: () => {} });
      await a.unsafe(`drop database if exists ${name} with (force)`).catch(() => {});
      await a.end();
    },
  };
}

export interface TestApp {
  url: string;
  /** The private NATS server this app's processes talk over, when it runs over NATS. */
  natsUrl?: string;
  process: RunningProcess;
  databaseUrl: string;
  stop(): Promise<void>;
  /** A fetch against the app: JSON body in, parsed JSON (or null) out. */
  call(
    method: string,
    path: string,
    options?: { token?: string; body?: unknown; headers?: Record<string, string>; raw?: string | Buffer },
  ): Promise<{ status: number; body: any; headers: Headers }>;
  /** Logs the bootstrap owner in and returns the session token. */
  ownerToken(): Promise<string>;
}

/**
 * The apps running in this worker. A worker runs many test files one after the other in one
 * process (vitest.config.ts: isolate is off), and the metrics registry is the process's: the first
 * app started after the last one stopped meets the registry a fresh process would.
 */
let appsRunning = 0;

/**
 * Starts the whole service in this process (one-process mode) with the bootstrap organization
 * `acme`: against a fresh database on the real Postgres server, or (`database: "embedded"`, the
 * default under TEST_DATABASE=embedded) with its own embedded Postgres in a fresh DATA_DIR.
 * `databaseUrl` shares another app's database (replicas).
 */
export async function startApp(
  options: {
    env?: Record<string, string>;
    nats?: boolean | string;
    databaseUrl?: string;
    database?: TestDatabase;
    extraHttp?: ProcessOptions["extraHttp"];
    /** The embedded database's DATA_DIR, kept when the app stops: the run's template (embedded-template.ts). */
    dataDir?: string;
  } = {},
): Promise<TestApp> {
  const embedded = !options.databaseUrl && (options.database ?? TEST_DATABASE) === "embedded";
  const dataDir = embedded ? (options.dataDir ? { dir: options.dataDir, cleanup() {} } : tempDataDir("wr-app-")) : undefined;
  if (dataDir && !options.dataDir && templateApplies(options.env)) {
    await copyTemplate(dataDir.dir, async (dir) => {
      const maker = await startApp({ database: "embedded", dataDir: dir });
      await maker.stop();
    });
  }
  const database = options.databaseUrl || embedded ? undefined : await freshDatabase({ migrated: true });
  // Each app gets its own NATS server (or the one it is given): subjects are global, so two apps
  // on one server would answer each other's calls against different databases.
  const privateNats = options.nats === true ? await startPrivateNats() : undefined;
  const natsUrl = typeof options.nats === "string" ? options.nats : privateNats?.url;
  if (appsRunning === 0) registry.resetMetrics();
  appsRunning++;
  let running: RunningProcess;
  try {
    running = await runProcess({
      name: "test",
      services: allServices,
      gateway: true,
      extraHttp: options.extraHttp,
      env: {
        DATABASE_URL: embedded ? "" : (options.databaseUrl ?? database!.url),
        // Asked for: with NATS the embedded database is refused unless asked for by name.
        ...(dataDir ? { DATA_DIR: dataDir.dir, DATABASE_EMBEDDED: "true" } : {}),
        PORT: "0",
        HOST: "127.0.0.1",
        LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "silent",
        NATS_URL: natsUrl ?? "",
        BOOTSTRAP_ORG_SLUG: OWNER.org,
        BOOTSTRAP_OWNER_EMAIL: OWNER.email,
        BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
        SHUTDOWN_GRACE_SECONDS: "1",
        METRICS_PORT: "0",
        // The run's test key (vitest.config.ts) with a Postgres server, which requires one; the
        // embedded database keeps its key file in DATA_DIR.
        ...(embedded ? {} : { SECRETS_KEYS: process.env.SECRETS_KEYS ?? "" }),
        // The run's hashing cost (vitest.config.ts), as the processes the tests start inherit it.
        ...(process.env.PASSWORD_SCRYPT_N ? { PASSWORD_SCRYPT_N: process.env.PASSWORD_SCRYPT_N } : {}),
        ...options.env,
      },
    });
  } catch (err) {
    appsRunning--;
    throw err;
  }
  const server = running.database.server;
  const databaseUrl = server
    ? `postgres://${server.user}:${encodeURIComponent(server.password)}@${server.host}:${server.port}/${server.database}`
    : (options.databaseUrl ?? database!.url);
  const app: TestApp = {
    url: running.url,
    natsUrl,
    process: running,
    databaseUrl,
    async stop() {
      try {
        await running.stop();
      } finally {
        appsRunning--;
      }
      await privateNats?.cleanup();
      await database?.drop();
      dataDir?.cleanup();
    },
    call: (method, path, callOptions = {}) => callApi(running.url, method, path, callOptions),
    async ownerToken() {
      const res = await app.call("POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
      if (res.status !== 200) throw new Error(`login failed: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body.accessToken as string;
    },
  };
  return app;
}

export async function callApi(
  baseUrl: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown; headers?: Record<string, string>; raw?: string | Buffer } = {},
): Promise<{ status: number; body: any; headers: Headers }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  let body: string | Buffer | undefined;
  if (options.raw !== undefined) body = options.raw;
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await fetch(baseUrl + path, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  return { status: res.status, body: parsed, headers: res.headers };
}
