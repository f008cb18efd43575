import { detached } from "../observability/tracing.js";

/**
 * Calls made together, handled together: `handleGroup` runs for the items that arrived in the
 * same turn of the event loop, and, while it runs, the items arriving meanwhile wait and make the
 * next group, one group at a time, at most `maxGroup` items each. Each caller's promise settles
 * with its group. A group that fails is handled again one item at a time, so one bad item fails
 * only its own caller, never the others it was grouped with.
 *
 * For consumers of events where each event costs a statement or two: a storm's events then cost
 * a statement or two per group. `handleGroup` must be idempotent per item, as event handlers are.
 */
export function groupCalls<T>(handleGroup: (items: T[]) => Promise<void>, maxGroup: number): (item: T) => Promise<void> {
  const waiting: { item: T; resolve: () => void; reject: (err: unknown) => void }[] = [];
  let running = false;

  async function handle(group: typeof waiting): Promise<void> {
    try {
      await handleGroup(group.map((w) => w.item));
      for (const w of group) w.resolve();
      return;
    } catch (err) {
      if (group.length === 1) {
        group[0]!.reject(err);
        return;
      }
    }
    for (const w of group) {
      await handleGroup([w.item]).then(w.resolve, w.reject);
    }
  }

  // The next group belongs to no one caller's trace.
  const next = detached((): void => {
    const group = waiting.splice(0, maxGroup);
    if (group.length === 0) {
      running = false;
      return;
    }
    void handle(group).finally(next);
  });

  return (item) =>
    new Promise<void>((resolve, reject) => {
      waiting.push({ item, resolve, reject });
      if (!running) {
        running = true;
        // A turn later: the calls made in this turn (a batch the bus hands over) join the group.
        setImmediate(next);
      }
    });
}
