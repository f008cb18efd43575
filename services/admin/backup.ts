import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import postgres from "postgres";
import { migrations as comms } from "../comms/migrations.js";
import { migrations as heartbeats } from "../heartbeats/migrations.js";
import { migrations as identity } from "../identity/migrations.js";
import { migrations as incidents } from "../incidents/migrations.js";
import { migrations as intake } from "../intake/migrations.js";
import { migrations as remotesource } from "../remotesource/migrations.js";
import { migrations as subscriptions } from "../subscriptions/migrations.js";
import { openDatabase, type Sql } from "../runtime/data/database.js";
import type { Logger } from "../runtime/observability/logger.js";
import { migrate, type Migration } from "../runtime/data/migrations.js";
import { KEY_FILE_NAME } from "../runtime/credentials/secret-box.js";
import { BackupFileError, BackupWriter, FORMAT_VERSION, readBackup, type BackupTable, type Manifest } from "./backup-file.js";

/** Every service's schema and its migrations, as this version knows them (services/process/all-services.ts). */
export const SCHEMAS: Record<string, readonly Migration[]> = { identity, incidents, intake, heartbeats, comms, remotesource, subscriptions };

const ident = (name: string) => `"${name.replaceAll('"', '""')}"`;
const qualified = (dotted: string) => dotted.split(".").map(ident).join(".");

/**
 * Copies every table of the services' schemas into a backup file, inside one read-only
 * REPEATABLE READ transaction: all tables as of one moment, while the service keeps writing.
 * Rows stream through in chunks; memory does not grow with the database. The file appears at
 * `out` only once complete (written beside it, then renamed).
 */
export async function writeBackupFile(sql: Sql, out: string, secretsKey: Buffer | undefined): Promise<Manifest> {
  const target = resolve(out);
  const partial = `${target}.partial`;
  rmSync(partial, { force: true });
  const writer = await BackupWriter.create(partial);
  try {
    const manifest = await sql.begin("isolation level repeatable read read only", async (tx) => {
      // A table locked against reads (a migration of a newer version starting) fails the backup, saying so, rather than hanging it.
      await tx`set local lock_timeout = '30s'`;
      const [version] = await tx<{ v: string }[]>`select current_setting('server_version') as v`;
      const schemaRows = await tx<{ schema: string }[]>`
        select n.nspname as schema from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where c.relname = 'schema_migrations' and c.relkind = 'r' order by 1`;
      const schemas: Record<string, number> = {};
      for (const { schema } of schemaRows) {
        const [level] = await tx.unsafe<{ id: number }[]>(`select coalesce(max(id), 0)::int as id from ${ident(schema)}.schema_migrations`);
        schemas[schema] = level!.id;
      }
      const names = schemaRows.map((r) => r.schema);
      const tableRows = await tx<{ name: string; columns: string[] }[]>`
        select n.nspname || '.' || c.relname as name,
               array(select a.attname::text from pg_attribute a
                     where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
                     order by a.attnum) as columns
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = any(${names}) and c.relkind = 'r' order by n.nspname, c.relname`;
      if (secretsKey) await writer.secretsKey(secretsKey);
      const tables: BackupTable[] = [];
      let dataBytes = 0;
      for (const { name, columns } of tableRows) {
        await writer.beginTable(name);
        let rows = 0;
        const copy = await tx.unsafe(`copy ${qualified(name)} (${columns.map(ident).join(", ")}) to stdout`).readable();
        for await (const chunk of copy as AsyncIterable<Buffer>) {
          for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) rows++;
          dataBytes += chunk.length;
          await writer.data(chunk);
        }
        resumeAfterCopy(copy);
        await writer.endTable();
        tables.push({ name, columns, rows });
      }
      // A sequence's value is read outside the snapshot, never below what the copied rows used.
      const sequenceRows = await tx<{ name: string }[]>`
        select n.nspname || '.' || c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = any(${names}) and c.relkind = 'S' order by 1`;
      const sequences: Manifest["sequences"] = {};
      for (const { name } of sequenceRows) {
        const [row] = await tx.unsafe<{ last_value: string; is_called: boolean }[]>(`select last_value::text, is_called from ${qualified(name)}`);
        sequences[name] = { lastValue: row!.last_value, isCalled: row!.is_called };
      }
      return writer.finish({
        format: FORMAT_VERSION,
        createdAt: new Date().toISOString(),
        postgresVersion: version!.v,
        schemas,
        tables,
        sequences,
        secretsKeyFile: secretsKey !== undefined,
        dataBytes,
      });
    });
    renameSync(partial, target);
    return manifest;
  } catch (err) {
    await writer.abandon();
    rmSync(partial, { force: true });
    throw err;
  }
}

/**
 * postgres.js pauses the connection's socket when a COPY stream's buffer is full and resumes it
 * when the stream is read again. When the table's last rows fill the buffer, the stream ends
 * without another read, the socket stays paused, and the next statement on the connection never
 * gets its answer (the backup hung with its connection "idle in transaction"). Reading once more
 * resumes it; on a socket that flows it does nothing.
 */
function resumeAfterCopy(copy: unknown): void {
  (copy as { _read?: (size: number) => void })._read?.(0);
}

/** The migration each schema of the backup needs; refuses a backup this version cannot restore. */
function checkSchemas(manifest: Manifest, path: string): void {
  for (const [schema, level] of Object.entries(manifest.schemas)) {
    const known = SCHEMAS[schema];
    if (!known)
      throw new BackupFileError(
        `${path} holds the schema "${schema}", which this version does not know: restore it with the version that made it, or a newer one`,
      );
    const latest = Math.max(0, ...known.map((m) => m.id));
    if (level > latest) {
      throw new BackupFileError(
        `${path} comes from a newer version: its schema "${schema}" is at migration ${level}, this version knows up to ${latest}. ` +
          "Restore it with the version that made it (or a newer one), then start that version.",
      );
    }
  }
}

/** Checks a backup file whole (format, structure, checksum, row counts, versions) without restoring it. */
export async function checkBackupFile(path: string): Promise<Manifest> {
  const manifest = await readBackup(path);
  checkSchemas(manifest, path);
  return manifest;
}

/** Why a DATA_DIR cannot take a restore, or undefined when it is new or empty. */
function occupied(dataDir: string): string | undefined {
  if (!existsSync(dataDir)) return undefined;
  const entries = readdirSync(dataDir);
  if (entries.length === 0) return undefined;
  return (
    `DATA_DIR ${dataDir} is not empty (it holds ${entries.slice(0, 5).join(", ")}${entries.length > 5 ? ", ..." : ""}): ` +
    "a restore goes only into a new or empty folder, so it never mixes with or overwrites a database. " +
    "Set DATA_DIR to a new folder (then point the service at it), or move this one away first."
  );
}

/**
 * Restores a backup into a new or empty DATA_DIR: checks the file whole first, creates the embedded
 * database, migrates each schema to the backup's level, copies every table in one transaction, sets
 * the sequences and puts the secrets key file back. The service's next start applies any newer
 * migrations of this version.
 */
export async function restoreBackupFile(path: string, dataDirOption: string, logger: Logger): Promise<Manifest> {
  const dataDir = resolve(dataDirOption);
  const refusal = occupied(dataDir);
  if (refusal) throw new BackupFileError(refusal);
  // First pass: the whole file is sound before anything is created.
  let secretsKey: Buffer | undefined;
  const manifest = await readBackup(path, (record) => {
    if (record.kind === "secrets-key") secretsKey = record.content;
  });
  checkSchemas(manifest, path);

  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const database = await openDatabase({ dataDir, poolSize: 1 }, logger);
  try {
    for (const [schema, level] of Object.entries(manifest.schemas)) {
      await migrate(
        database.sql,
        schema,
        SCHEMAS[schema]!.filter((m) => m.id <= level),
      );
    }
    await database.sql.begin(async (tx) => {
      // No foreign-key or other triggers while the rows go in: they were consistent when copied.
      await tx`set local session_replication_role = replica`;
      if (manifest.tables.length) await tx.unsafe(`truncate ${manifest.tables.map((t) => qualified(t.name)).join(", ")}`);
      const tables = new Map(manifest.tables.map((t) => [t.name, t]));
      let copy: NodeJS.WritableStream | undefined;
      let finished: Promise<void> | undefined;
      // Second pass: each table's rows stream from the file into its COPY.
      await readBackup(path, async (record) => {
        if (record.kind === "table") {
          const table = tables.get(record.name)!;
          const stream = await tx.unsafe(`copy ${qualified(table.name)} (${table.columns.map(ident).join(", ")}) from stdin`).writable();
          finished = new Promise<void>((resolve, reject) => {
            stream.once("finish", resolve);
            stream.once("error", reject);
          });
          copy = stream;
        } else if (record.kind === "data") {
          if (!copy!.write(record.bytes)) await new Promise((r) => copy!.once("drain", r));
        } else if (record.kind === "end-table") {
          copy!.end();
          await finished;
          copy = undefined;
        }
      });
      for (const [name, { lastValue, isCalled }] of Object.entries(manifest.sequences)) {
        await tx`select setval(${qualified(name)}::regclass, ${lastValue}::bigint, ${isCalled})`;
      }
    });
    // Fresh statistics, so the first queries are planned on the restored sizes, not empty tables.
    await database.sql`analyze`;
    if (secretsKey) writeFileSync(join(dataDir, KEY_FILE_NAME), secretsKey, { mode: 0o600, flag: "wx" });
  } catch (err) {
    await database.close();
    throw new BackupFileError(
      `the restore into ${dataDir} failed: ${(err as Error).message}. The folder holds a partial restore: remove it before trying again.`,
    );
  }
  await database.close();
  return manifest;
}

/** How to reach the embedded Postgres of a service that runs on DATA_DIR (it holds the folder's lock). */
export function runningServerConnection(dataDir: string): { host: string; port: number; database: string; username: string; password: string } {
  const pidFile = join(dataDir, "pg", "postmaster.pid");
  let port: number;
  let password: string;
  try {
    // postmaster.pid: PID, data folder, start time, port, ...
    port = Number.parseInt(readFileSync(pidFile, "utf8").split("\n")[3] ?? "", 10);
    password = readFileSync(join(dataDir, "pg-password"), "utf8").trim();
  } catch (err) {
    throw new BackupFileError(`a service holds DATA_DIR ${dataDir} but its database is not running (${(err as Error).message}); wait until it has started`);
  }
  if (!Number.isInteger(port)) throw new BackupFileError(`cannot read the port of the running database from ${pidFile}; wait until the service has started`);
  return { host: "127.0.0.1", port, database: "postgres", username: "postgres", password };
}

/** A one-connection pool on the running service's database. */
export function connectToRunningServer(dataDir: string): Sql {
  return postgres({ ...runningServerConnection(dataDir), max: 1, onnotice: () => {}, connection: { application_name: "warroom-backup" } });
}
