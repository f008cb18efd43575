import type { PendingQuery, Row } from "postgres";
import type { Sql } from "./database.js";
import type { Logger } from "../observability/logger.js";

/**
 * One table's retention: a statement that deletes at most `limit` rows past their retention and
 * answers how many it deleted. It picks its rows `FOR UPDATE SKIP LOCKED`, so replicas sweeping
 * at once each take other rows and never wait for one another.
 */
export interface RetentionRule {
  /** The table, for logs. */
  table: string;
  deleteBatch(sql: Sql, limit: number): Promise<number>;
}

/**
 * The rule most tables want: deletes the rows of `table` (schema-qualified) that `where` picks,
 * `t` naming the table in it, at most `limit` at a time.
 */
export function batchedDelete(table: string, where: (sql: Sql) => PendingQuery<Row[]>): RetentionRule {
  return {
    table,
    deleteBatch: async (sql, limit) =>
      (
        await sql`
          delete from ${sql(table)} where ctid = any(array(
            select ctid from ${sql(table)} t
            where ${where(sql)}
            limit ${limit} for update skip locked))`
      ).count,
  };
}

export const RETENTION_SWEEP = {
  /** Rows one statement deletes at most: a short transaction, whatever the backlog. */
  batchRows: 1_000,
  /** Statements per table and sweep at most; a larger backlog is taken over the next sweeps. */
  batchesPerSweep: 50,
  /** Every process sweeps this often; the first sweep comes a minute after it starts. */
  everyMs: 10 * 60_000,
  firstAfterMs: 60_000,
} as const;

/**
 * Deletes what is past its retention, table by table, a bounded batch at a time; answers the rows
 * deleted per table. Safe to run in every replica at once (see RetentionRule).
 */
export async function sweepRetention(
  sql: Sql,
  rules: readonly RetentionRule[],
  limits: { batchRows?: number; batchesPerSweep?: number } = {},
): Promise<Record<string, number>> {
  const batchRows = limits.batchRows ?? RETENTION_SWEEP.batchRows;
  const batches = limits.batchesPerSweep ?? RETENTION_SWEEP.batchesPerSweep;
  const deleted: Record<string, number> = {};
  for (const rule of rules) {
    let total = 0;
    for (let i = 0; i < batches; i++) {
      const count = await rule.deleteBatch(sql, batchRows);
      total += count;
      if (count < batchRows) break;
    }
    deleted[rule.table] = total;
  }
  return deleted;
}

/** Runs sweepRetention on a timer in the background; stop() waits for a sweep in progress. */
export function startRetentionSweep(deps: { sql: Sql; logger: Logger; rules: readonly RetentionRule[] }): { stop(): Promise<void> } {
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> | undefined;
  let stopped = false;
  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      current = sweepRetention(deps.sql, deps.rules)
        .then(
          (deleted) => {
            if (Object.values(deleted).some((n) => n > 0)) deps.logger.info({ deleted }, "deleted rows past their retention");
          },
          (err: unknown) => deps.logger.warn({ err: String(err) }, "deleting rows past their retention failed; the next sweep retries"),
        )
        .finally(() => {
          current = undefined;
          schedule(RETENTION_SWEEP.everyMs);
        });
    }, delayMs);
    timer.unref();
  };
  schedule(RETENTION_SWEEP.firstAfterMs);
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await current;
    },
  };
}
