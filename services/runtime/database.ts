import { resolve } from "node:path";
import postgres from "postgres";
import { lockDataDir, type DataDirLock } from "./data-dir-lock.js";
import { startEmbeddedPostgres, type EmbeddedPostgres } from "./embedded-postgres.js";
import type { Logger } from "./logger.js";

export type Sql = postgres.Sql<{}>;
export type TransactionSql = postgres.TransactionSql<{}>;

export interface Database {
  sql: Sql;
  /** Whether this is the embedded database: a Postgres server this process runs in DATA_DIR. */
  embedded: boolean;
  /** The embedded server, when there is one. */
  server?: EmbeddedPostgres;
  close(): Promise<void>;
}

type Connection = { url: string } | { host: string; port: number; database: string; username: string; password: string };

/** One pool shape for both modes: only where the server is differs. */
function openPool(connection: Connection, poolSize: number): Sql {
  const options = {
    max: poolSize,
    onnotice: () => {},
    // Prepared statements are reused across calls on a connection: fewer parse round trips.
    prepare: true,
    connection: { application_name: "warroom" },
  };
  return "url" in connection ? postgres(connection.url, options) : postgres({ ...connection, ...options });
}

/**
 * Opens the database: the Postgres server at DATABASE_URL, or, without one, the embedded Postgres:
 * a real Postgres server process in DATA_DIR on a loopback port with a generated password, owned
 * by this process (DATA_DIR is locked while it runs) and stopped with it.
 */
export async function openDatabase(options: { url?: string | undefined; dataDir: string; poolSize: number }, logger: Logger): Promise<Database> {
  if (options.url) {
    const sql = openPool({ url: options.url }, options.poolSize);
    return { sql, embedded: false, close: () => sql.end({ timeout: 5 }) };
  }

  const lock: DataDirLock = lockDataDir(resolve(options.dataDir));
  let server: EmbeddedPostgres;
  try {
    server = await startEmbeddedPostgres({ dataDir: lock.dir, logger });
  } catch (err) {
    lock.release();
    throw err;
  }
  const sql = openPool({ host: server.host, port: server.port, database: server.database, username: server.user, password: server.password }, options.poolSize);
  let closed: Promise<void> | undefined;
  return {
    sql,
    embedded: true,
    server,
    close() {
      return (closed ??= (async () => {
        try {
          await sql.end({ timeout: 5 });
          await server.stop();
        } finally {
          lock.release();
        }
      })());
    },
  };
}
