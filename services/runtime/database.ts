import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import postgres from "postgres";
import type { Logger } from "./logger.js";
import { tracedSql, tracingEnabled } from "./tracing.js";

export type Sql = postgres.Sql<{}>;
export type TransactionSql = postgres.TransactionSql<{}>;

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
  /** Whether this is the embedded database (one connection, one process). */
  embedded: boolean;
  close(): Promise<void>;
}

/**
 * Opens the database: the Postgres server at DATABASE_URL, or, without one, an embedded Postgres
 * (PGlite) in DATA_DIR served on a loopback port over the wire protocol, so one SQL path serves
 * both modes.
 */
export async function openDatabase(
  options: { url?: string | undefined; dataDir: string; poolSize: number },
  logger: Logger,
): Promise<Database> {
  if (options.url) {
    const sql = postgres(options.url, {
      max: options.poolSize,
      onnotice: () => {},
      // Prepared statements are reused across calls on a connection: fewer parse round trips.
      prepare: true,
      connection: { application_name: "warroom" },
    });
    return { sql: traced(sql), embedded: false, poolStats: () => poolStatsOf(sql), close: () => sql.end({ timeout: 5 }) };
  }

  const { PGlite } = await import("@electric-sql/pglite");
  const { PGLiteSocketServer } = await import("@electric-sql/pglite-socket");
  const dir = resolve(options.dataDir, "pg");
  mkdirSync(dir, { recursive: true });
  const db = await PGlite.create(dir);
  const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0 });
  await server.start();
  const [host, port] = server.getServerConn().split(":");
  logger.info({ dataDir: dir }, "embedded Postgres started");
  // PGlite is single-session: one connection keeps transactions from interleaving.
  const sql = postgres({ host, port: Number(port), database: "postgres", username: "postgres", max: 1, onnotice: () => {} });
  return {
    sql: traced(sql),
    embedded: true,
    poolStats: () => poolStatsOf(sql),
    async close() {
      await sql.end({ timeout: 5 });
      await server.stop();
      await db.close();
    },
  };
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
