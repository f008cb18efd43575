import type { RetentionRule } from "../../runtime/data/retention-sweep.js";

/**
 * Grouping generations no delivery has used for GROUPING_GENERATION_RETENTION_DAYS are forgotten
 * (`seen_at` is refreshed at most daily as deliveries read it, see grouping.ts). The identity's
 * next delivery then starts from the first generation again, and the window check moves it on
 * past any incident still open beyond the window.
 */
export function groupingGenerationRetention(days: number): RetentionRule[] {
  return [
    {
      table: "intake.grouping_generations",
      deleteBatch: async (sql, limit) =>
        (
          await sql`
            delete from intake.grouping_generations where ctid = any(array(
              select ctid from intake.grouping_generations
              where seen_at < now() - make_interval(days => ${days})
              limit ${limit} for update skip locked))`
        ).count,
    },
  ];
}
