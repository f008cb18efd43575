import type { RetentionRule } from "../runtime/data/retention-sweep.js";

/**
 * What investigations keep, and for how long (INVESTIGATION_RETENTION_DAYS): evidence recorded
 * longer ago is deleted, and so are settled runs that completed longer ago, except each incident's
 * newest run: a re-run numbers itself after it, and its timeline entry (`investigation:<run>`) must
 * not collide with an earlier run's. Pending and running runs are never deleted.
 */
export function investigationRetention(days: number): RetentionRule[] {
  return [
    {
      table: "remotesource.evidence",
      deleteBatch: async (sql, limit) =>
        (
          await sql`
            delete from remotesource.evidence where ctid = any(array(
              select ctid from remotesource.evidence
              where recorded_at < now() - make_interval(days => ${days})
              limit ${limit} for update skip locked))`
        ).count,
    },
    {
      table: "remotesource.investigations",
      deleteBatch: async (sql, limit) =>
        (
          await sql`
            delete from remotesource.investigations where ctid = any(array(
              select ctid from remotesource.investigations i
              where i.state in ('done', 'skipped', 'failed') and i.completed_at < now() - make_interval(days => ${days})
                and exists (
                  select 1 from remotesource.investigations newer
                  where newer.org_id = i.org_id and newer.incident_id = i.incident_id and newer.run > i.run)
              limit ${limit} for update skip locked))`
        ).count,
    },
  ];
}
