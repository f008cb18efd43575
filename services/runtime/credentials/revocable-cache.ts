import type { Broadcast } from "../transport/broadcast.js";
import { detachedFromCancellation, NEVER_ABORTS, untilAborted } from "../http/request-context.js";

/**
 * How long an entry is kept when no notice drops it: changes are broadcast, so this only bounds
 * how long a lost notice could go unnoticed.
 */
export const REVOCABLE_CACHE_TTL_MS = 30_000;

/**
 * A per-process cache of lookups (credentials, and intake's per-organization grouping overrides and
 * correlation settings) that a change must reach on every replica at once.
 * Whoever changes what an entry was read from broadcasts the entry's group on `subject` before it
 * answers, and every process drops that group's entries on receipt (an empty notice drops all).
 * While the broadcast is unavailable (NATS down) nothing is served from the cache, every
 * connection-state change empties it, and a lookup that overlapped a notice is not kept; entries
 * also expire after `ttlMs` (REVOCABLE_CACHE_TTL_MS unless given).
 *
 * Negative answers (`undefined`) are cached too: a 256-bit secret nobody holds now is never issued
 * later, and a sender repeating a wrong one costs one lookup.
 *
 * Requests that miss together share one lookup: in a storm, as many requests as are in flight miss
 * at once when an entry expires, and would each ask. A request joins a lookup only if no notice
 * arrived since it began, and stops waiting when its own caller gives up.
 */
export function createRevocableCache<V>(options: { broadcast: Broadcast; subject: string; ttlMs?: number; maxEntries?: number }) {
  const { broadcast, subject } = options;
  const ttlMs = options.ttlMs ?? REVOCABLE_CACHE_TTL_MS;
  const maxEntries = options.maxEntries ?? 10_000;
  const entries = new Map<string, { value: V | undefined; group: string; until: number }>();
  // Counts notices (and connection-state changes). A lookup remembers the count it began under;
  // if a notice arrived meanwhile, its answer may predate the change and is not cached (it still
  // answers the request that asked, which began before the change).
  let notices = 0;
  /** The lookup under way per key, and the notice count it began under. */
  const lookups = new Map<string, { startedUnder: number; value: Promise<V | undefined> }>();
  broadcast.subscribe(subject, (group) => {
    notices++;
    if (!group) entries.clear();
    else for (const [key, entry] of entries) if (entry.group === group) entries.delete(key);
  });
  // Notices may have been missed around any disconnect: nothing cached before it is trusted after.
  broadcast.onStateChange(() => {
    notices++;
    entries.clear();
  });

  /** Looks up and caches the answer unless a notice arrived meanwhile; no one caller's cancellation ends it. */
  function lookUp(key: string, group: string, load: () => Promise<V | undefined>, startedUnder: number): Promise<V | undefined> {
    return detachedFromCancellation(async () => {
      const value = await load();
      if (startedUnder === notices && broadcast.available()) {
        if (entries.size >= maxEntries) entries.delete(entries.keys().next().value!);
        entries.set(key, { value, group, until: Date.now() + ttlMs });
      }
      return value;
    });
  }

  return {
    /**
     * The cached answer for `key`, else `load()`'s (shared with every request missing at the same
     * time). `group` is what a change notice names to drop this entry.
     */
    async get(key: string, group: string, load: () => Promise<V | undefined>, signal: AbortSignal = NEVER_ABORTS): Promise<V | undefined> {
      const hit = entries.get(key);
      if (hit && hit.until > Date.now() && broadcast.available()) return hit.value;
      let lookup = lookups.get(key);
      if (lookup?.startedUnder !== notices) {
        const started = { startedUnder: notices, value: lookUp(key, group, load, notices) };
        lookups.set(key, started);
        const forget = () => lookups.get(key) === started && lookups.delete(key);
        void started.value.then(forget, forget);
        lookup = started;
      }
      return untilAborted(lookup.value, signal);
    },
  };
}
