import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { loadConfig } from "../runtime/config/config.js";
import { DataDirLockedError } from "../runtime/data/data-dir-lock.js";
import { openDatabase, type Database, type Sql } from "../runtime/data/database.js";
import { createLogger } from "../runtime/observability/logger.js";
import { KEY_FILE_NAME } from "../runtime/credentials/secret-box.js";
import { checkBackupFile, connectToRunningServer, restoreBackupFile, writeBackupFile } from "./backup.js";
import type { Manifest } from "./backup-file.js";

export const BACKUP_USAGE = `usage: npm run admin -- backup --out <file>
       npm run admin -- restore --from <file>
       npm run admin -- check-backup --from <file>

For the embedded database in DATA_DIR (no DATABASE_URL; with a Postgres server use pg_dump and
pg_restore, see docs/OPERATIONS.md). backup copies every table as of one moment, and the secrets key
file, into one owner-only file, while the service runs (or, when none runs, starting the database
itself). restore puts a backup into a new or empty DATA_DIR; start the service on it afterwards.
check-backup reads a backup whole and prints what it holds, restoring nothing.`;

const MB = 1024 * 1024;

function summary(manifest: Manifest): string {
  const rows = manifest.tables.reduce((sum, t) => sum + t.rows, 0);
  const levels = Object.entries(manifest.schemas)
    .map(([schema, level]) => `${schema} ${level}`)
    .join(", ");
  return (
    `${manifest.tables.length} tables, ${rows} rows, ${(manifest.dataBytes / MB).toFixed(1)} MB of data, taken ${manifest.createdAt} ` +
    `from Postgres ${manifest.postgresVersion}; migrations: ${levels}; secrets key file: ${manifest.secretsKeyFile ? "included" : "not included (SECRETS_KEYS was set: keep that value with the backup)"}`
  );
}

/** The command: 0 on success, 1 on failure (the message says what to do), 2 for usage. */
export async function runBackupCommand(args: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args,
    allowPositionals: true,
    options: { out: { type: "string" }, from: { type: "string" }, help: { type: "boolean" } },
  });
  const command = positionals[0];
  const file = command === "backup" ? values.out : values.from;
  if (values.help || !file || positionals.length !== 1) {
    console.error(BACKUP_USAGE);
    return values.help ? 0 : 2;
  }
  const started = Date.now();
  const seconds = () => ((Date.now() - started) / 1000).toFixed(1);
  try {
    if (command === "check-backup") {
      const manifest = await checkBackupFile(file);
      console.log(`${file} is a complete backup: ${summary(manifest)}`);
      return 0;
    }
    const config = loadConfig();
    if (config.DATABASE_URL) {
      console.error(
        `DATABASE_URL is set: the data is in that Postgres server, not in DATA_DIR. Back it up with pg_dump -Fc and restore with pg_restore (docs/OPERATIONS.md, "Backups"); keep SECRETS_KEYS with it.`,
      );
      return 1;
    }
    const logger = createLogger(config.LOG_LEVEL === "info" ? "warn" : config.LOG_LEVEL, "admin");
    const dataDir = resolve(config.DATA_DIR);
    if (command === "restore") {
      const manifest = await restoreBackupFile(file, dataDir, logger);
      console.log(`restored ${file} into ${dataDir} in ${seconds()} s: ${summary(manifest)}`);
      if (!manifest.secretsKeyFile) console.log("Set SECRETS_KEYS to the value the backed-up service used: sealed values open only with it.");
      return 0;
    }
    if (command !== "backup") {
      console.error(BACKUP_USAGE);
      return 2;
    }
    if (!existsSync(join(dataDir, "pg", "PG_VERSION"))) {
      console.error(`DATA_DIR ${dataDir} holds no embedded database: set DATA_DIR to the folder the service runs on`);
      return 1;
    }
    const keyPath = join(dataDir, KEY_FILE_NAME);
    const secretsKey = existsSync(keyPath) ? readFileSync(keyPath) : undefined;
    // A running service holds DATA_DIR: read its database over its own port. Otherwise start the
    // database here (holding DATA_DIR, so a service cannot start on it meanwhile).
    let database: Database | undefined;
    let sql: Sql;
    try {
      database = await openDatabase({ dataDir, poolSize: 1 }, logger);
      sql = database.sql;
    } catch (err) {
      if (!(err instanceof DataDirLockedError)) throw err;
      sql = connectToRunningServer(dataDir);
    }
    try {
      const manifest = await writeBackupFile(sql, file, secretsKey);
      console.log(`backup written to ${resolve(file)} in ${seconds()} s: ${summary(manifest)}`);
      if (!secretsKey) console.log("No secrets key file in DATA_DIR: keep the SECRETS_KEYS value with this backup, apart from it.");
      return 0;
    } finally {
      if (database) await database.close();
      else await sql.end({ timeout: 5 });
    }
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    return 1;
  }
}
