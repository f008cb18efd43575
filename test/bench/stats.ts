/** Small helpers the benchmarks share: percentiles and a printed table. */
export function percentile(sortedMs: number[], p: number): number {
  if (sortedMs.length === 0) return NaN;
  const index = Math.min(sortedMs.length - 1, Math.ceil((p / 100) * sortedMs.length) - 1);
  return sortedMs[Math.max(0, index)]!;
}

export function summarize(samplesMs: number[]): { n: number; p50: number; p99: number; mean: number } {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  const mean = sorted.reduce((a, b) => a + b, 0) / (sorted.length || 1);
  return { n: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), mean };
}

export function printTable(title: string, rows: Record<string, string | number>[]): void {
  console.log(`\n${title}`);
  console.table(rows);
}

export const fmt = (ms: number) => `${ms.toFixed(3)} ms`;
