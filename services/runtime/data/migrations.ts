import type { Sql } from "./database.js";

export interface Migration {
  /** Applied in ascending order; unique within its service; never edited once released. */
  id: number;
  name: string;
  sql: string;
}

function checkSchemaName(schema: string): void {
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`bad schema name ${schema}`);
}

/**
 * Applies a service's forward-only migrations to its own schema and returns those it applied. An
 * advisory lock taken inside the transaction makes replicas that start together (or a migration
 * Job racing a replica) apply each migration exactly once: the second waits, then finds them applied.
 */
export async function migrate(sql: Sql, schema: string, migrations: readonly Migration[]): Promise<Migration[]> {
  checkSchemaName(schema);
  const sorted = [...migrations].sort((a, b) => a.id - b.id);
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext(${`migrate:${schema}`}))`;
    await tx.unsafe(`create schema if not exists ${schema}`);
    await tx.unsafe(
      `create table if not exists ${schema}.schema_migrations (id integer primary key, name text not null, applied_at timestamptz not null default now())`,
    );
    const applied = new Set((await tx.unsafe<{ id: number }[]>(`select id from ${schema}.schema_migrations`)).map((r) => r.id));
    const done: Migration[] = [];
    for (const migration of sorted) {
      if (applied.has(migration.id)) continue;
      await tx.unsafe(migration.sql);
      await tx.unsafe(`insert into ${schema}.schema_migrations (id, name) values ($1, $2)`, [migration.id, migration.name]);
      done.push(migration);
    }
    return done;
  });
}

/**
 * The migrations of `migrations` not yet applied to the schema (all of them when it has none),
 * without changing anything. Migrations the database has and the code does not know are not a
 * problem: that is the previous release running on a newer schema (a rollback).
 */
export async function pendingMigrations(sql: Sql, schema: string, migrations: readonly Migration[]): Promise<Migration[]> {
  checkSchemaName(schema);
  const [table] = await sql<{ present: boolean }[]>`select to_regclass(${`${schema}.schema_migrations`}) is not null as present`;
  const applied = table!.present ? new Set((await sql.unsafe<{ id: number }[]>(`select id from ${schema}.schema_migrations`)).map((r) => r.id)) : new Set();
  return [...migrations].sort((a, b) => a.id - b.id).filter((m) => !applied.has(m.id));
}

/** A process started with MIGRATE_ON_START=false on a schema behind its code: it refuses to serve. */
export class MigrationsPendingError extends Error {
  override name = "MigrationsPendingError";
  constructor(pending: ReadonlyArray<{ schema: string; migrations: readonly Migration[] }>) {
    const list = pending.map((p) => `${p.schema}: ${p.migrations.map((m) => `${m.id} (${m.name})`).join(", ")}`);
    super(
      `refusing to start: the database's schema is behind this version and MIGRATE_ON_START=false; missing migrations:\n  ${list.join("\n  ")}\n` +
        "Run the migrations first (`node dist/services/process/migrate.js`, `npm run migrate`, or the deployment's migration Job) with the same DATABASE_URL, then start again; or set MIGRATE_ON_START=true.",
    );
  }
}
