import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { Sql } from "../../runtime/data/database.js";
import type { Logger } from "../../runtime/observability/logger.js";
import type { SecretBox } from "../../runtime/credentials/secret-box.js";
import type { HeartbeatStore } from "../store.js";

/**
 * A heartbeat's own ping key: the secret in its ping URL (`/ping/{key}`), in Healthchecks' form
 * (a random UUID, 122 random bits), so a URL copied from a Healthchecks crontab line keeps its
 * shape. It is stored twice, never in clear: its SHA-256 (what a ping is looked up by) and sealed
 * under the secrets key (so members can read the ping URL again, as Healthchecks shows it). A
 * copy of the database alone neither pings nor reads a key.
 */
export interface NewPingKey {
  key: string;
  hash: string;
  sealed: Buffer;
  sealedBy: string;
}

/** What a key looks like; anything else is refused before any lookup. */
export const PING_KEY_FORMAT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The associated data of a sealed key: a sealed key copied into another heartbeat's row does not open. */
function sealedFor(orgId: string, name: string): string {
  return `heartbeat-ping-key:${orgId}:${name}`;
}

/**
 * The organization's ping key, for URLs by name (`/ping/{key}/{name}`): 22 URL-safe characters
 * (128 random bits) as Healthchecks' project ping key, never the shape of a heartbeat's key, so the
 * first path segment says which kind it is.
 */
export const ORG_PING_KEY_FORMAT = /^[A-Za-z0-9_-]{22}$/;

export function newOrgPingKey(): { key: string; hash: string } {
  const key = randomBytes(16).toString("base64url");
  return { key, hash: hashPingKey(key) };
}

export function hashPingKey(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

export function newPingKey(box: SecretBox, orgId: string, name: string): NewPingKey {
  const key = randomUUID();
  const sealed = box.seal(key, sealedFor(orgId, name));
  return { key, hash: hashPingKey(key), sealed: sealed.ciphertext, sealedBy: sealed.keyId };
}

/** The key again, from its sealed copy; undefined when the row has none yet. */
export function openPingKey(
  box: SecretBox,
  row: { org_id: string; name: string; ping_key_sealed: Buffer | null; ping_key_sealed_by: string | null },
): string | undefined {
  if (!row.ping_key_sealed || !row.ping_key_sealed_by) return undefined;
  return box.open({ keyId: row.ping_key_sealed_by, ciphertext: row.ping_key_sealed }, sealedFor(row.org_id, row.name));
}

export interface PingKeyOwner {
  orgId: string;
  name: string;
}

/** Entries the process remembers at most; past it the oldest are forgotten. */
const CACHE_ENTRIES = 100_000;

/**
 * Which heartbeat a key hash belongs to. Remembered per process, because the answer only narrows
 * the ping's own statement, which still requires the heartbeat's current hash: after a rotation,
 * a deletion or a re-registration a remembered owner matches nothing, so a stale entry can only
 * refuse, never accept. Unknown hashes are not remembered: a freshly rotated key works at once on
 * every replica.
 */
export function createPingKeyOwners(sql: Sql): { owner(hash: string): Promise<PingKeyOwner | undefined>; forget(hash: string): void } {
  const known = new Map<string, PingKeyOwner>();
  return {
    async owner(hash) {
      const cached = known.get(hash);
      if (cached) return cached;
      const [row] = await sql<{ org_id: string; name: string }[]>`select org_id, name from heartbeats.heartbeats where ping_key_hash = ${hash}`;
      if (!row) return undefined;
      const owner = { orgId: row.org_id, name: row.name };
      if (known.size >= CACHE_ENTRIES) known.delete(known.keys().next().value!);
      known.set(hash, owner);
      return owner;
    },
    /** After a ping by this hash matched nothing: the key was rotated or its heartbeat deleted. */
    forget(hash) {
      known.delete(hash);
    },
  };
}

/**
 * Gives every heartbeat registered before ping keys existed a key of its own, a thousand at a
 * time. Replicas starting together each give a key only where none is yet (the first wins). The
 * secrets key is only opened (and, without SECRETS_KEYS, its file created) when there is work.
 */
export async function givePingKeys(store: Pick<HeartbeatStore, "keyless" | "giveKey">, box: () => SecretBox, logger: Logger): Promise<void> {
  let given = 0;
  for (;;) {
    const rows = await store.keyless(1000);
    if (rows.length === 0) break;
    for (const row of rows) if (await store.giveKey(row.org_id, row.name, newPingKey(box(), row.org_id, row.name))) given++;
  }
  if (given > 0) logger.info({ given }, "gave heartbeats registered before ping keys a ping key each");
}
