import { Code, ConnectError } from "@connectrpc/connect";
import type { Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { Broadcast } from "./broadcast.js";
import type { Clients } from "./clients.js";
import { sha256Hex } from "./secrets.js";

export const INVALID_INGEST_TOKEN = "Invalid trigger ingest token";

/** The refusal a cached unknown token gets: the one identity gives. */
function invalidToken(): ConnectError {
  return new ConnectError(INVALID_INGEST_TOKEN, Code.Unauthenticated);
}

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
 * flood of wrong tokens then costs identity nothing.
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
      const startedUnder = revocations;
      let org: Organization | undefined;
      try {
        org = await clients.identity.resolveIngestToken({}, { signal, headers: { authorization: `Bearer ${token}` } });
      } catch (err) {
        if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
      }
      if (startedUnder === revocations && broadcast.available()) {
        if (entries.size >= maxEntries) entries.delete(entries.keys().next().value!);
        entries.set(hash, { org, until: Date.now() + ttlMs });
      }
      if (!org) throw invalidToken();
      return org;
    },
  };
}
