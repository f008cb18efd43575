/**
 * Maps `items` through `fn` with at most `limit` calls in flight, and returns the results in the
 * order of the items. The first rejection rejects the whole map (calls already started still
 * run to their end; no new one starts after it).
 */
export async function mapBounded<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  if (!(limit >= 1)) throw new RangeError(`limit must be at least 1, got ${limit}`);
  const results: R[] = new Array(items.length);
  let next = 0;
  let failed = false;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length && !failed) {
      const index = next++;
      try {
        results[index] = await fn(items[index]!);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  });
  await Promise.all(workers);
  return results;
}
