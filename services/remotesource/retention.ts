import { batchedDelete, type RetentionRule } from "../runtime/data/retention-sweep.js";

/**
 * What investigations keep, and for how long (INVESTIGATION_RETENTION_DAYS): evidence recorded
 * longer ago is deleted, and so are settled runs that completed longer ago, except each incident's
 * newest run: a re-run numbers itself after it, and its timeline entry (`investigation:<run>`) must
 * not collide with an earlier run's. Pending and running runs are never deleted.
 */
export function investigationRetention(days: number): RetentionRule[] {
  return [
    batchedDelete("remotesource.evidence", (sql) => sql`t.recorded_at < now() - make_interval(days => ${days})`),
    batchedDelete(
      "remotesource.investigations",
      (sql) => sql`
        t.state in ('done', 'skipped', 'failed') and t.completed_at < now() - make_interval(days => ${days})
          and exists (
            select 1 from remotesource.investigations newer
            where newer.org_id = t.org_id and newer.incident_id = t.incident_id and newer.run > t.run)`,
    ),
  ];
}
