import type { Sql } from "./database.js";

export interface Migration {
  /** Applied in ascending order; never edited once released. */
  id: number;
  name: string;
  sql: string;
}

/**
 * Applies a service's forward-only migrations to its own schema. An advisory lock taken inside
 * the transaction makes replicas that start together apply each migration exactly once.
 */
export async function migrate(sql: Sql, schema: string, migrations: readonly Migration[]): Promise<number> {
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`bad schema name ${schema}`);
  const sorted = [...migrations].sort((a, b) => a.id - b.id);
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext(${`migrate:${schema}`}))`;
    await tx.unsafe(`create schema if not exists ${schema}`);
    await tx.unsafe(
      `create table if not exists ${schema}.schema_migrations (id integer primary key, name text not null, applied_at timestamptz not null default now())`,
    );
    const applied = new Set((await tx.unsafe<{ id: number }[]>(`select id from ${schema}.schema_migrations`)).map((r) => r.id));
    let count = 0;
    for (const migration of sorted) {
      if (applied.has(migration.id)) continue;
      await tx.unsafe(migration.sql);
      await tx.unsafe(`insert into ${schema}.schema_migrations (id, name) values ($1, $2)`, [migration.id, migration.name]);
      count++;
    }
    return count;
  });
}
