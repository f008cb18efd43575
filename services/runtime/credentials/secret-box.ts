import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { chmodSync, linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { ConfigError } from "../config/config.js";
import type { Logger } from "../observability/logger.js";

/**
 * Secrets at rest (chat-webhook URLs, remote-source credentials): AES-256-GCM under a key from
 * configuration. A sealed value carries the id of the key that sealed it, so keys can rotate: the
 * first configured key seals, every configured key opens. The associated data binds a ciphertext
 * to its place (organization, purpose): a value copied into another row does not open there.
 */

const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const KEY_ID = /^[A-Za-z0-9_.-]{1,64}$/;
/** The key file written in DATA_DIR when SECRETS_KEYS is not set. */
export const KEY_FILE_NAME = "secrets.key";

export interface SecretKey {
  id: string;
  key: Buffer;
}

export interface Sealed {
  /** Which key sealed it; stored beside the ciphertext. */
  keyId: string;
  /** nonce (12 bytes) || ciphertext || tag (16 bytes). */
  ciphertext: Buffer;
}

export class SecretBoxError extends Error {
  override name = "SecretBoxError";
}

export interface SecretBox {
  /** The id of the key that seals. */
  readonly primaryKeyId: string;
  seal(plaintext: string, associatedData: string): Sealed;
  /** Throws SecretBoxError when the key is not configured or the value was tampered with. */
  open(sealed: Sealed, associatedData: string): string;
  /** Whether a value sealed under `keyId` should be sealed again under the primary key. */
  isStale(keyId: string): boolean;
}

/**
 * Seals and opens secrets with AES-256-GCM: seals with the first key, opens with any, each sealed
 * value naming its key.
 */
export function createSecretBox(keys: readonly SecretKey[]): SecretBox {
  if (keys.length === 0) throw new SecretBoxError("at least one key is needed");
  const byId = new Map<string, Buffer>();
  for (const { id, key } of keys) {
    if (!KEY_ID.test(id)) throw new SecretBoxError(`key id "${id}" must be 1-64 letters, digits, dots, dashes or underscores`);
    if (key.length !== KEY_BYTES) throw new SecretBoxError(`key "${id}" must be ${KEY_BYTES} bytes`);
    if (byId.has(id)) throw new SecretBoxError(`key id "${id}" appears twice`);
    byId.set(id, Buffer.from(key));
  }
  const primary = keys[0]!;
  return {
    primaryKeyId: primary.id,
    seal(plaintext, associatedData) {
      const nonce = randomBytes(NONCE_BYTES);
      const cipher = createCipheriv("aes-256-gcm", byId.get(primary.id)!, nonce, { authTagLength: TAG_BYTES });
      cipher.setAAD(Buffer.from(associatedData, "utf8"));
      const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
      return { keyId: primary.id, ciphertext: Buffer.concat([nonce, body, cipher.getAuthTag()]) };
    },
    open(sealed, associatedData) {
      const key = byId.get(sealed.keyId);
      if (!key) throw new SecretBoxError(`the secret was sealed with key "${sealed.keyId}", which is not configured in SECRETS_KEYS`);
      if (sealed.ciphertext.length < NONCE_BYTES + TAG_BYTES) throw new SecretBoxError("the sealed secret is damaged");
      const nonce = sealed.ciphertext.subarray(0, NONCE_BYTES);
      const tag = sealed.ciphertext.subarray(sealed.ciphertext.length - TAG_BYTES);
      const body = sealed.ciphertext.subarray(NONCE_BYTES, sealed.ciphertext.length - TAG_BYTES);
      const decipher = createDecipheriv("aes-256-gcm", key, nonce, { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(associatedData, "utf8"));
      decipher.setAuthTag(tag);
      try {
        return Buffer.concat([decipher.update(body), decipher.final()]).toString("utf8");
      } catch {
        throw new SecretBoxError("the sealed secret does not open: it was altered or belongs elsewhere");
      }
    },
    isStale(keyId) {
      return keyId !== primary.id;
    },
  };
}

/**
 * Parses SECRETS_KEYS: comma-separated "<id>:<base64 of 32 bytes>" entries, the first sealing.
 * Errors name the variable and the entry's id, never key material.
 */
export function parseSecretKeys(value: string, variable = "SECRETS_KEYS"): SecretKey[] {
  const entries = value
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (entries.length === 0) throw new ConfigError(`invalid configuration:\n  ${variable}: no keys`);
  const seen = new Set<string>();
  return entries.map((entry, index) => {
    const colon = entry.indexOf(":");
    const id = colon > 0 ? entry.slice(0, colon) : "";
    const problem = (what: string) => new ConfigError(`invalid configuration:\n  ${variable}: entry ${index + 1}${id ? ` ("${id}")` : ""} ${what}`);
    if (!KEY_ID.test(id)) throw problem('must be "<id>:<base64 of 32 bytes>" with an id of letters, digits, dots, dashes or underscores');
    const encoded = entry.slice(colon + 1);
    if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw problem("is not base64");
    const key = Buffer.from(encoded, "base64");
    if (key.length !== KEY_BYTES) throw problem(`must decode to ${KEY_BYTES} bytes, not ${key.length}`);
    if (seen.has(id)) throw problem("repeats an id");
    seen.add(id);
    return { id, key };
  });
}

/** A new "<id>:<base64>" entry: what an operator puts in SECRETS_KEYS (first, to rotate to it). */
export function newSecretKeyEntry(id: string): string {
  return `${id}:${randomBytes(KEY_BYTES).toString("base64")}`;
}

/**
 * The key file for one-machine installs without SECRETS_KEYS: created once in DATA_DIR, readable
 * by the owner only, and reused on every start. Replicas that share a database must share keys,
 * so multi-process deployments set SECRETS_KEYS instead.
 */
export function loadOrCreateKeyFile(dataDir: string): { keys: SecretKey[]; path: string; created: boolean; loosePermissions: boolean } {
  const dir = resolve(dataDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = join(dir, KEY_FILE_NAME);
  let created = false;
  try {
    statSync(path);
  } catch {
    // Written aside and linked into place: link fails when another process won the race, and
    // then that process's complete file is used; a half-written key file is never read.
    const temporary = join(dir, `.${KEY_FILE_NAME}.${process.pid}.${randomBytes(4).toString("hex")}`);
    writeFileSync(temporary, `${newSecretKeyEntry("local1")}\n`, { mode: 0o600, flag: "wx" });
    chmodSync(temporary, 0o600);
    try {
      linkSync(temporary, path);
      created = true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    } finally {
      unlinkSync(temporary);
    }
  }
  const keys = parseSecretKeys(readFileSync(path, "utf8"), `key file ${KEY_FILE_NAME} in DATA_DIR`);
  const loosePermissions = process.platform !== "win32" && (statSync(path).mode & 0o077) !== 0;
  return { keys, path, created, loosePermissions };
}

/**
 * The process's secret box: SECRETS_KEYS when set (validated at once), otherwise the key file in
 * DATA_DIR, created on first use so processes that never store a secret write nothing.
 */
export function secretBoxFromConfig(
  config: { SECRETS_KEYS?: string | undefined; DATA_DIR: string },
  onKeyFile?: (info: { path: string; created: boolean; loosePermissions: boolean }) => void,
): () => SecretBox {
  if (config.SECRETS_KEYS) {
    const box = createSecretBox(parseSecretKeys(config.SECRETS_KEYS));
    return () => box;
  }
  let box: SecretBox | undefined;
  return () => {
    if (!box) {
      const file = loadOrCreateKeyFile(config.DATA_DIR);
      box = createSecretBox(file.keys);
      onKeyFile?.({ path: file.path, created: file.created, loosePermissions: file.loosePermissions });
    }
    return box;
  };
}

/** How to make a SECRETS_KEYS entry, in the words every refusal and document uses. */
export const MAKE_SECRETS_KEY = `node -e "console.log('k1:' + require('crypto').randomBytes(32).toString('base64'))"`;

/**
 * The secret box of a service that stores secrets, from its configuration: as secretBoxFromConfig,
 * and warns (once, when the key file is first used) that the key file was just created, that
 * others can read it, or that separate processes would each need the same keys. With an external
 * database it refuses to start without SECRETS_KEYS: a key file beside a process (a container's
 * filesystem) is lost on restart, and every value it sealed in the database with it.
 */
export function serviceSecretBox(
  config: { SECRETS_KEYS?: string | undefined; DATA_DIR: string; NATS_URL?: string | undefined; DATABASE_URL?: string | undefined },
  logger: Logger,
): () => SecretBox {
  if (config.DATABASE_URL && !config.SECRETS_KEYS) {
    throw new ConfigError(
      "refusing to start: SECRETS_KEYS is not set while DATABASE_URL names an external database, so the key that encrypts " +
        "webhook URLs, credentials and heartbeat ping keys in it would live only on this machine and be lost with it. " +
        `Make a key with ${MAKE_SECRETS_KEY}, set it as SECRETS_KEYS on every process, and keep a copy with the database's backups.`,
    );
  }
  return secretBoxFromConfig(config, (file) => {
    if (file.created) logger.warn({ path: file.path }, "SECRETS_KEYS is not set: created a key file for secrets at rest; back it up with the database");
    if (file.loosePermissions) logger.warn({ path: file.path }, "the secrets key file is readable by others than its owner; chmod 600 it");
    if (config.NATS_URL) logger.warn("SECRETS_KEYS is not set while services run as separate processes: every process needs the same keys");
  });
}
