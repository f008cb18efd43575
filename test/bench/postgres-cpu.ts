import { readFileSync } from "node:fs";
import type postgres from "postgres";

/**
 * CPU time of every Postgres process, by process id, from /proc: backends, the WAL writer,
 * autovacuum (backends outlive a run: pools). Empty where Postgres runs on another machine.
 */
export async function postgresCpuMs(admin: postgres.Sql): Promise<Map<number, number>> {
  const rows = await admin<{ pid: number }[]>`select pid from pg_stat_activity`;
  const out = new Map<number, number>();
  for (const { pid } of rows) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      out.set(pid, ((Number(fields[11]) + Number(fields[12])) / 100) * 1000);
    } catch {
      // The backend ended, or it is not on this machine.
    }
  }
  return out;
}

/** The CPU milliseconds Postgres spent between two readings. */
export function cpuDelta(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0;
  for (const [pid, ms] of after) total += ms - (before.get(pid) ?? 0);
  return total;
}
