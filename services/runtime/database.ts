import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import postgres from "postgres";
import type { Logger } from "./logger.js";
import { throwIfCallerGaveUp } from "./request-context.js";

export type Sql = postgres.Sql<{}>;
export type TransactionSql = postgres.TransactionSql<{}>;

export interface Database {
  sql: Sql;
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
    return { sql: guardTransactions(sql), embedded: false, close: () => sql.end({ timeout: 5 }) };
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
    sql: guardTransactions(sql),
    embedded: true,
    async close() {
      await sql.end({ timeout: 5 });
      await server.stop();
      await db.close();
    },
  };
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
