import type { Sql } from "../../runtime/data/database.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import { type AuditRecord, recordAudit } from "../../runtime/transport/events.js";

/** A grouping override as stored: `version` moves on with every change of the row (a row set again after a delete starts over). */
export interface OverrideRow {
  source: string;
  attach_key: string;
  window_hours: number;
  version: number;
}

/** An override as an admin or a configuration file sets it. */
export interface OverrideSetting {
  source: string;
  attachKey: string;
  windowHours: number;
}

/**
 * What grouping overrides need from their tables: each organization's overrides (one per source
 * badge), and the generation of each attach identity a window has moved on. Every change writes
 * its audit record in the same transaction.
 */
export interface GroupingStore {
  /** The organization's overrides, for deliveries (in no order). */
  overrides(orgId: string): Promise<OverrideRow[]>;
  /** The organization's overrides by source, for the routes. */
  list(orgId: string): Promise<OverrideRow[]>;
  /** Sets the source's override (its version moves on when it existed) and writes the audit record. */
  put(orgId: string, override: OverrideSetting, audit: AuditRecord): Promise<void>;
  /** Deletes the source's override and, when there was one, writes the audit record; false when there was none. */
  delete(orgId: string, source: string, audit: AuditRecord): Promise<boolean>;
  /**
   * The identity's current generation (0 when none was moved on). Reading it marks it in use, at
   * most daily, so the retention sweep (generation-retention.ts) keeps it.
   */
  generation(orgId: string, identity: string): Promise<number>;
  /**
   * Moves the identity's generation on from `from`, only if it is still `from` (so replicas that
   * race agree on the next one), and answers the generation it is at after.
   */
  moveOn(orgId: string, identity: string, from: number): Promise<number>;
}

/** The grouping tables on Postgres; audit records go to `outbox` in the same transactions. */
export function createPostgresGroupingStore(sql: Sql, outbox: Outbox): GroupingStore {
  async function generation(orgId: string, identity: string): Promise<number> {
    const [row] = await sql<{ generation: number; stale: boolean }[]>`
      select generation, seen_at < now() - interval '1 day' as stale from intake.grouping_generations where org_id = ${orgId} and identity = ${identity}`;
    // In use: kept from the retention sweep (generation-retention.ts), refreshed at most daily.
    if (row?.stale) void sql`update intake.grouping_generations set seen_at = now() where org_id = ${orgId} and identity = ${identity}`.catch(() => {});
    return row?.generation ?? 0;
  }

  return {
    async overrides(orgId) {
      return sql<OverrideRow[]>`select source, attach_key, window_hours, version from intake.grouping_overrides where org_id = ${orgId}`;
    },

    async list(orgId) {
      return sql<OverrideRow[]>`
        select source, attach_key, window_hours, version from intake.grouping_overrides where org_id = ${orgId} order by source`;
    },

    async put(orgId, override, audit) {
      await sql.begin(async (tx) => {
        await tx`
          insert into intake.grouping_overrides (org_id, source, attach_key, window_hours) values (${orgId}, ${override.source}, ${override.attachKey}, ${override.windowHours})
          on conflict (org_id, source) do update set attach_key = excluded.attach_key, window_hours = excluded.window_hours,
            version = intake.grouping_overrides.version + 1`;
        await recordAudit(outbox, tx, audit);
      });
    },

    async delete(orgId, source, audit) {
      return sql.begin(async (tx) => {
        const rows = await tx`delete from intake.grouping_overrides where org_id = ${orgId} and source = ${source} returning source`;
        if (rows.length > 0) await recordAudit(outbox, tx, audit);
        return rows.length > 0;
      });
    },

    generation,

    async moveOn(orgId, identity, from) {
      // Only the first replica moves it from `from`; the others read what it moved to.
      await sql`
        insert into intake.grouping_generations (org_id, identity, generation) values (${orgId}, ${identity}, ${from + 1})
        on conflict (org_id, identity) do update set generation = ${from + 1}, seen_at = now() where intake.grouping_generations.generation = ${from}`;
      return generation(orgId, identity);
    },
  };
}
