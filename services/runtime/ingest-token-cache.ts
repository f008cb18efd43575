import { Code, ConnectError } from "@connectrpc/connect";
import type { Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { Broadcast } from "./broadcast.js";
import type { Clients } from "./clients.js";
import { detachedFromCancellation, NEVER_ABORTS, untilAborted } from "./request-context.js";
import { sha256Hex } from "./secrets.js";

export const INVALID_INGEST_TOKEN = "Invalid trigger ingest token";

/** The refusal a cached unknown token gets: the one identity gives. */
function invalidToken(): ConnectError {
  return new ConnectError(INVALID_INGEST_TOKEN, Code.Unauthenticated);
}

/** A shared lookup's own bound, for when the request it began under carries no deadline. */
const LOOKUP_TIMEOUT_MS = 10_000;

/** Subject identity broadcasts the hash of a replaced ingest token on. */
export const INGEST_TOKEN_REVOKED = "credentials.ingest_token.revoked";

/**
 * The ingest-token lookup of the trigger endpoint, cached per process: under an alert storm the
 * same token arrives thousands of times a second. A replaced token must be refused on the very
 * next request on every replica, so identity broadcasts the old token's hash before it answers
 * the issue call, and every process drops it on receipt. While the broadcast is unavailable
 * (NATS down) nothing is served from the cache, every connection-state change empties it, and a
 * lookup that overlapped a revocation is not kept; entries also expire after `ttlMs`.
 *
 * Unknown tokens are remembered too: a 256-bit value nobody holds now is never issued later, and a
 * sender repeating a wrong token costs identity one lookup.
 *
 * Requests that miss together share one lookup: in a storm, as many requests as are in flight
 * miss at once when an entry expires, and would each ask identity. A request joins a lookup only
 * if no revocation arrived since it began, and stops waiting when its own caller gives up.
 */
export type IngestTokenResolver = ReturnType<typeof createIngestTokenResolver>;

/**
 * Resolves an ingest token to its organization through identity, caching answers for `ttlMs` while
 * the broadcast is up; a revocation notice drops the revoked token's entry.
 */
export function createIngestTokenResolver(options: { clients: Clients; broadcast: Broadcast; ttlMs?: number; maxEntries?: number }) {
  const { clients, broadcast } = options;
  const ttlMs = options.ttlMs ?? 30_000;
  const maxEntries = options.maxEntries ?? 10_000;
  const entries = new Map<string, { org: Organization | undefined; until: number }>();
  // Counts revocations (and connection-state changes). A lookup remembers the count it began
  // under; if a revocation arrived meanwhile, its answer may predate the rotation and is not
  // cached (it still answers the request that asked, which began before the rotation).
  let revocations = 0;
  /** The lookup under way per token hash, and the revocation count it began under. */
  const lookups = new Map<string, { startedUnder: number; org: Promise<Organization | undefined> }>();
  broadcast.subscribe(INGEST_TOKEN_REVOKED, (hash) => {
    revocations++;
    if (hash) entries.delete(hash);
    else entries.clear();
  });
  // Notices may have been missed around any disconnect: nothing cached before it is trusted after.
  broadcast.onStateChange(() => {
    revocations++;
    entries.clear();
  });
  return {
    async resolve(token: string, signal?: AbortSignal): Promise<Organization> {
      const hash = sha256Hex(token);
      const hit = entries.get(hash);
      if (hit && hit.until > Date.now() && broadcast.available()) {
        if (!hit.org) throw invalidToken();
        return hit.org;
      }
      let lookup = lookups.get(hash);
      if (lookup?.startedUnder !== revocations) {
        const started = { startedUnder: revocations, org: lookUp(token, hash, revocations) };
        lookups.set(hash, started);
        const forget = () => lookups.get(hash) === started && lookups.delete(hash);
        void started.org.then(forget, forget);
        lookup = started;
      }
      const org = await untilAborted(lookup.org, signal ?? NEVER_ABORTS);
      if (!org) throw invalidToken();
      return org;
    },
  };

  /**
   * Asks identity, and caches the answer unless a revocation arrived meanwhile. Shared by every
   * request that joins it, so no one caller's cancellation ends it; the deadline it began under does.
   */
  function lookUp(token: string, hash: string, startedUnder: number): Promise<Organization | undefined> {
    return detachedFromCancellation(async () => {
      let org: Organization | undefined;
      try {
        org = await clients.identity.resolveIngestToken({}, { timeoutMs: LOOKUP_TIMEOUT_MS, headers: { authorization: `Bearer ${token}` } });
      } catch (err) {
        if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
      }
      if (startedUnder === revocations && broadcast.available()) {
        if (entries.size >= maxEntries) entries.delete(entries.keys().next().value!);
        entries.set(hash, { org, until: Date.now() + ttlMs });
      }
      return org;
    });
  }
}
