import { batchedDelete, type RetentionRule } from "../../runtime/data/retention-sweep.js";

/**
 * Grouping generations no delivery has used for GROUPING_GENERATION_RETENTION_DAYS are forgotten
 * (`seen_at` is refreshed at most daily as deliveries read it, see grouping.ts). The identity's
 * next delivery then starts from the first generation again, and the window check moves it on
 * past any incident still open beyond the window.
 */
export function groupingGenerationRetention(days: number): RetentionRule[] {
  return [batchedDelete("intake.grouping_generations", (sql) => sql`t.seen_at < now() - make_interval(days => ${days})`)];
}
