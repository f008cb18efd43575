import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import postgres from "postgres";
import type { Logger } from "./logger.js";

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
    return { sql, embedded: false, close: () => sql.end({ timeout: 5 }) };
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
    sql,
    embedded: true,
    async close() {
      await sql.end({ timeout: 5 });
      await server.stop();
      await db.close();
    },
  };
}

/** Connections of the background pool (see openBackgroundPool). */
export const BACKGROUND_POOL_SIZE = 2;

/**
 * A second, small pool on the same server for background work (outbox relays, sweeps, event
 * consumers), so that however long it holds its connections, the delivery pool (`Database.sql`)
 * keeps all of its own. Same options as the delivery pool but its size and application name.
 * The embedded database shares its one pool (one process, one small server).
 */
export function openBackgroundPool(database: Database, url: string | undefined): { sql: Sql; close(): Promise<void> } {
  if (database.embedded || !url) return { sql: database.sql, close: async () => {} };
  const sql = postgres(url, {
    max: BACKGROUND_POOL_SIZE,
    onnotice: () => {},
    prepare: true,
    connection: { application_name: "warroom-background" },
  });
  return { sql, close: () => sql.end({ timeout: 5 }) };
}
