import { Code, ConnectError } from "@connectrpc/connect";
import type { Organization } from "../../../gen/warroom/identity/v1/identity_pb.js";
import type { Broadcast } from "../transport/broadcast.js";
import type { Clients } from "../transport/clients.js";
import { createRevocableCache } from "./revocable-cache.js";
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
 * The ingest-token lookup of the trigger endpoint, cached per process (a revocable cache): under an
 * alert storm the same token arrives thousands of times a second. A replaced token must be refused
 * on the very next request on every replica, so identity broadcasts the old token's hash before it
 * answers the issue call, and every process drops it on receipt.
 */
export type IngestTokenResolver = ReturnType<typeof createIngestTokenResolver>;

/**
 * Resolves an ingest token to its organization through identity, caching answers for `ttlMs` while
 * the broadcast is up; a revocation notice drops the revoked token's entry.
 */
export function createIngestTokenResolver(options: { clients: Clients; broadcast: Broadcast; ttlMs?: number; maxEntries?: number }) {
  const { clients } = options;
  const cache = createRevocableCache<Organization>({ ...options, subject: INGEST_TOKEN_REVOKED });
  return {
    async resolve(token: string, signal?: AbortSignal): Promise<Organization> {
      const hash = sha256Hex(token);
      const org = await cache.get(hash, hash, () => lookUp(token), signal);
      if (!org) throw invalidToken();
      return org;
    },
  };

  /** Asks identity; an unknown token is an answer (undefined), any other failure is thrown. */
  async function lookUp(token: string): Promise<Organization | undefined> {
    try {
      return await clients.identity.resolveIngestToken({}, { timeoutMs: LOOKUP_TIMEOUT_MS, headers: { authorization: `Bearer ${token}` } });
    } catch (err) {
      if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
      return undefined;
    }
  }
}
