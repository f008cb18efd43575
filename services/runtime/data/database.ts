import { resolve } from "node:path";
import postgres from "postgres";
import { lockDataDir, type DataDirLock } from "./data-dir-lock.js";
import { startEmbeddedPostgres, type EmbeddedPostgres } from "./embedded-postgres.js";
import type { Logger } from "../observability/logger.js";
import { tracedSql, tracingEnabled } from "../observability/tracing.js";
import { throwIfCallerGaveUp } from "../http/request-context.js";

export type Sql = postgres.Sql;
export type TransactionSql = postgres.TransactionSql;

export interface PoolStats {
  max: number;
  busy: number;
  idle: number;
  connecting: number;
  waiting: number;
}

export interface Database {
  sql: Sql;
  /** How full the connection pool is now (read on each metrics scrape). */
  poolStats(): PoolStats;
  /** Whether this is the embedded database: a Postgres server this process runs in DATA_DIR. */
  embedded: boolean;
  /** The embedded server, when there is one. */
  server?: EmbeddedPostgres;
  /** Where the server is, for a second pool on it (see openBackgroundPool). */
  connection: Connection;
  close(): Promise<void>;
}

export type Connection = { url: string } | { host: string; port: number; database: string; username: string; password: string };

/**
 * How a pool's connections plan their prepared statements:
 * - `per-call` (the default): planned on every call. A kept plan lasts until the table's
 *   statistics change, so a plan made while a table was nearly empty (a seq scan) was still used
 *   when an alert storm had filled it with thousands of rows before autovacuum looked
 *   (record-statements.test.ts).
 * - `cached`: Postgres's own choice, for a statement on a table that grows by registrations, which
 *   autovacuum's analyze (and with it a new plan) follows, not by a storm.
 * - `kept, by index`: planned once per connection and kept, with sequential scans off. Only for
 *   statements that reach every row they read through the one index that fits it, so a plan made
 *   on an empty table reads what one made on a full table does: planning each call was a third
 *   of Postgres's CPU per delivery.
 */
export type Planning = "per-call" | "cached" | "kept, by index";

const PLANNING_SETTINGS: Record<Planning, Record<string, string>> = {
  "per-call": { plan_cache_mode: "force_custom_plan" },
  cached: {},
  // With sequential scans off, any plan that still holds one (postgres.js's array-types query on
  // every new connection, say) costs past jit_above_cost, and compiling it takes 100 ms: no JIT.
  "kept, by index": { plan_cache_mode: "force_generic_plan", enable_seqscan: "off", jit: "off" },
};

/** One pool shape for both modes: only where the server is differs. */
function openPool(connection: Connection, poolSize: number, applicationName = "warroom", planning: Planning = "per-call"): Sql {
  const options = {
    max: poolSize,
    onnotice: () => {},
    // Prepared statements are reused across calls on a connection: fewer parse round trips.
    prepare: true,
    connection: { application_name: applicationName, ...PLANNING_SETTINGS[planning] },
  };
  return guardTransactions("url" in connection ? postgres(connection.url, options) : postgres({ ...connection, ...options }));
}

/**
 * Opens the database: the Postgres server at DATABASE_URL, or, without one, the embedded Postgres:
 * a real Postgres server process in DATA_DIR on a loopback port with a generated password, owned
 * by this process (DATA_DIR is locked while it runs) and stopped with it.
 */
export async function openDatabase(options: { url?: string | undefined; dataDir: string; poolSize: number }, logger: Logger): Promise<Database> {
  if (options.url) {
    const connection = { url: options.url };
    const sql = openPool(connection, options.poolSize);
    return { sql: traced(sql), embedded: false, poolStats: () => poolStatsOf(sql), connection, close: () => sql.end({ timeout: 5 }) };
  }

  const lock: DataDirLock = lockDataDir(resolve(options.dataDir));
  let server: EmbeddedPostgres;
  try {
    server = await startEmbeddedPostgres({ dataDir: lock.dir, logger });
  } catch (err) {
    lock.release();
    throw err;
  }
  const connection = { host: server.host, port: server.port, database: server.database, username: server.user, password: server.password };
  const sql = openPool(connection, options.poolSize);
  let closed: Promise<void> | undefined;
  return {
    sql: traced(sql),
    embedded: true,
    poolStats: () => poolStatsOf(sql),
    server,
    connection,
    close() {
      closed ??= (async () => {
        try {
          await sql.end({ timeout: 5 });
          await server.stop();
        } finally {
          lock.release();
        }
      })();
      return closed;
    },
  };
}

/** Connections of the background pool (see openBackgroundPool). */
export const BACKGROUND_POOL_SIZE = 2;

/**
 * A second, small pool on the same server for background work (outbox relays, sweeps), so that
 * however long it holds its connections, the delivery pool (`Database.sql`) keeps all of its own.
 * Same options as the delivery pool but its size and application name; both modes alike. Close it
 * before the database.
 */
export function openBackgroundPool(database: Database): { sql: Sql; close(): Promise<void> } {
  const sql = openPoolOn(database, BACKGROUND_POOL_SIZE, "warroom-background");
  return { sql, close: () => sql.end({ timeout: 5 }) };
}

/** Another pool on the database's server, named in pg_stat_activity; its opener ends it. */
export function openPoolOn(database: Database, size: number, applicationName: string, planning: Planning = "per-call"): Sql {
  return traced(openPool(database.connection, size, applicationName, planning));
}

/** With tracing on, every statement is a span; off, the handle is postgres.js's own. */
function traced(sql: Sql): Sql {
  return tracingEnabled() ? tracedSql(sql) : sql;
}

/**
 * postgres.js keeps its pool's queues private; the patch in patches/ adds `poolStats()` to read
 * their lengths. Without it (an unpatched install) the pool reads as empty rather than failing.
 */
function poolStatsOf(sql: Sql): PoolStats {
  const read = (sql as unknown as { poolStats?: () => PoolStats }).poolStats;
  return read ? read() : { max: sql.options.max, busy: 0, idle: 0, connecting: 0, waiting: 0 };
}

/**
 * A transaction is not begun for a call whose caller has already given up (its deadline passed or
 * it was canceled): the work would be done for nobody, and a retry may be doing it already.
 */
function guardTransactions(sql: Sql): Sql {
  const begin = sql.begin.bind(sql) as (...args: unknown[]) => Promise<unknown>;
  (sql as unknown as { begin: (...args: unknown[]) => Promise<unknown> }).begin = (...args: unknown[]) => {
    try {
      throwIfCallerGaveUp();
    } catch (err) {
      return Promise.reject(err);
    }
    return begin(...args);
  };
  return sql;
}
