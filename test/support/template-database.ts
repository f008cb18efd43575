import { createHash } from "node:crypto";
import postgres from "postgres";
import { allMigrations } from "../../services/process/all-migrations.js";
import { migrate } from "../../services/runtime/data/migrations.js";

/**
 * A database with every service's migrations applied, on the test server, named by a digest of the
 * migrations: a test database copied from it (`create database … template …`) starts with its
 * schema in place. Creating a database and applying every migration cost its app's start about
 * 0.7 s, mostly Postgres's; a copy costs a fraction of that, and the migrations still run at
 * start (each finds itself applied), as on a restart.
 */
export const TEMPLATE_DATABASE = `wr_template_${createHash("sha256").update(JSON.stringify(allMigrations)).digest("hex").slice(0, 16)}`;

/** Serializes the workers and runs that would build the same template. */
const BUILD_LOCK = 0x77725f74;

let built: Promise<void> | undefined;

/**
 * Builds TEMPLATE_DATABASE on the server at `adminUrl` unless it is there; once per process, or
 * again when `again` says the one built is gone (dropped by hand, or as stale by another
 * checkout's run on the same server).
 */
export function migratedTemplate(adminUrl: string, again = false): Promise<string> {
  if (again) built = undefined;
  built ??= build(adminUrl).catch((err: unknown) => {
    built = undefined;
    throw err;
  });
  return built.then(() => TEMPLATE_DATABASE);
}

async function build(adminUrl: string): Promise<void> {
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await admin`select pg_advisory_lock(${BUILD_LOCK})`;
    const [present] = await admin`select 1 from pg_database where datname = ${TEMPLATE_DATABASE}`;
    if (present) return;
    // Built under another name and renamed when complete: a run killed halfway leaves no template
    // that looks whole. Templates of other migrations (an earlier checkout's) built over a day ago
    // are dropped when not in use; a younger one may be another checkout's run going on now.
    const building = `${TEMPLATE_DATABASE}_building`;
    await admin.unsafe(`drop database if exists ${building}`);
    const others = await admin<{ datname: string; note: string | null }[]>`
      select datname, shobj_description(oid, 'pg_database') as note from pg_database where datname like 'wr\\_template\\_%'`;
    for (const { datname, note } of others) {
      const builtAt = Number(/^built (\d+)$/.exec(note ?? "")?.[1] ?? 0);
      if (Date.now() - builtAt > 86_400_000) await admin.unsafe(`drop database if exists ${datname}`).catch(() => {});
    }
    await admin.unsafe(`create database ${building}`);
    const url = new URL(adminUrl);
    url.pathname = `/${building}`;
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      for (const { schema, migrations } of allMigrations) await migrate(sql, schema, migrations);
    } finally {
      await sql.end();
    }
    await admin.unsafe(`alter database ${building} rename to ${TEMPLATE_DATABASE}`);
    await admin.unsafe(`comment on database ${TEMPLATE_DATABASE} is 'built ${Date.now()}'`);
  } finally {
    await admin`select pg_advisory_unlock(${BUILD_LOCK})`.catch(() => {});
    await admin.end();
  }
}
