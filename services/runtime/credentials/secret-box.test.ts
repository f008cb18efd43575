import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigError } from "../config/config.js";
import {
  createSecretBox,
  KEY_FILE_NAME,
  loadOrCreateKeyFile,
  newSecretKeyEntry,
  parseSecretKeys,
  SecretBoxError,
  secretBoxFromConfig,
  serviceSecretBox,
} from "./secret-box.js";
import type { Logger } from "../observability/logger.js";
import { chmodSync } from "node:fs";

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "secret-box-"));
  dirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const SECRET = "https://chat.example.com/workflows/abc/triggers/manual/paths/invoke?sig=s3cr3t";

describe("secret box", () => {
  it("seals with AES-256-GCM under the first key and opens again; the ciphertext holds no plaintext", () => {
    const box = createSecretBox(parseSecretKeys(`${newSecretKeyEntry("k1")},${newSecretKeyEntry("k0")}`));
    const sealed = box.seal(SECRET, "org-1");
    expect(sealed.keyId).toBe("k1");
    expect(sealed.ciphertext.length).toBe(12 + Buffer.byteLength(SECRET) + 16);
    expect(sealed.ciphertext.includes(Buffer.from("s3cr3t"))).toBe(false);
    expect(box.open(sealed, "org-1")).toBe(SECRET);
    // A fresh nonce every time: the same secret never seals to the same bytes.
    expect(box.seal(SECRET, "org-1").ciphertext.equals(sealed.ciphertext)).toBe(false);
  });

  it("refuses a value moved to another place, or altered", () => {
    const box = createSecretBox(parseSecretKeys(newSecretKeyEntry("k1")));
    const sealed = box.seal(SECRET, "org-1");
    expect(() => box.open(sealed, "org-2")).toThrow(SecretBoxError);
    const altered = Buffer.from(sealed.ciphertext);
    altered[20] = altered[20]! ^ 1;
    expect(() => box.open({ keyId: "k1", ciphertext: altered }, "org-1")).toThrow(/altered/);
  });

  it("rotates: a new first key seals, the old one still opens and is reported stale", () => {
    const oldEntry = newSecretKeyEntry("old");
    const before = createSecretBox(parseSecretKeys(oldEntry));
    const sealed = before.seal(SECRET, "org-1");
    const after = createSecretBox(parseSecretKeys(`${newSecretKeyEntry("new")},${oldEntry}`));
    expect(after.open(sealed, "org-1")).toBe(SECRET);
    expect(after.isStale(sealed.keyId)).toBe(true);
    expect(after.seal(SECRET, "org-1").keyId).toBe("new");
    expect(after.isStale("new")).toBe(false);
    const dropped = createSecretBox(parseSecretKeys(newSecretKeyEntry("new")));
    expect(() => dropped.open(sealed, "org-1")).toThrow(/"old", which is not configured in SECRETS_KEYS/);
  });

  it("names SECRETS_KEYS and never the key material in a configuration error", () => {
    const short = `k1:${Buffer.alloc(16, 7).toString("base64")}`;
    expect(() => parseSecretKeys(short)).toThrow(ConfigError);
    try {
      parseSecretKeys(short);
    } catch (err) {
      expect((err as Error).message).toMatch(/SECRETS_KEYS: entry 1 \("k1"\) must decode to 32 bytes, not 16/);
      expect((err as Error).message).not.toContain(short.slice(3));
    }
    expect(() => parseSecretKeys("no-colon-here")).toThrow(/SECRETS_KEYS: entry 1 must be/);
    expect(() => parseSecretKeys(`k1:${"!".repeat(44)}`)).toThrow(/is not base64/);
    const entry = newSecretKeyEntry("k1");
    expect(() => parseSecretKeys(`${entry},${entry}`)).toThrow(/repeats an id/);
  });

  it("without SECRETS_KEYS creates one key file, owner-only, on first use, and reuses it", () => {
    const dir = join(tempDir(), "data");
    const getBox = secretBoxFromConfig({ DATA_DIR: dir });
    // Nothing is written until a secret is stored.
    expect(() => statSync(join(dir, KEY_FILE_NAME))).toThrow();
    const sealed = getBox().seal(SECRET, "org-1");
    const path = join(dir, KEY_FILE_NAME);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, "utf8")).toMatch(/^local1:[A-Za-z0-9+/]{43}=\n$/);
    const again = loadOrCreateKeyFile(dir);
    expect(again.created).toBe(false);
    expect(again.loosePermissions).toBe(false);
    expect(createSecretBox(again.keys).open(sealed, "org-1")).toBe(SECRET);
  });

  it("with SECRETS_KEYS set, validates at once and writes no file", () => {
    const dir = tempDir();
    expect(() => secretBoxFromConfig({ SECRETS_KEYS: "k1:short", DATA_DIR: dir })).toThrow(ConfigError);
    const box = secretBoxFromConfig({ SECRETS_KEYS: newSecretKeyEntry("k9"), DATA_DIR: dir })();
    expect(box.primaryKeyId).toBe("k9");
    expect(() => statSync(join(dir, KEY_FILE_NAME))).toThrow();
  });

  it("with an external database, refuses to start without SECRETS_KEYS, saying how to make a key, and writes no file", () => {
    const dir = tempDir();
    const logger = { warn: () => {} } as unknown as Logger;
    expect(() => serviceSecretBox({ DATA_DIR: dir, DATABASE_URL: "postgres://db/warroom" }, logger)).toThrow(ConfigError);
    expect(() => serviceSecretBox({ DATA_DIR: dir, DATABASE_URL: "postgres://db/warroom" }, logger)).toThrow(/SECRETS_KEYS is not set.*randomBytes\(32\)/);
    expect(() => statSync(join(dir, KEY_FILE_NAME))).toThrow();
    const box = serviceSecretBox({ SECRETS_KEYS: newSecretKeyEntry("k1"), DATA_DIR: dir, DATABASE_URL: "postgres://db/warroom" }, logger)();
    expect(box.primaryKeyId).toBe("k1");
  });

  it("warns once, when a service first uses the key file: created, readable by others, or shared by separate processes", () => {
    const warnings: string[] = [];
    const logger = { warn: (...args: unknown[]) => void warnings.push(String(args.at(-1))) } as unknown as Logger;
    const dir = tempDir();
    const getBox = serviceSecretBox({ DATA_DIR: dir, NATS_URL: "nats://bus:4222" }, logger);
    expect(warnings).toEqual([]);
    getBox();
    getBox();
    expect(warnings).toEqual([
      "SECRETS_KEYS is not set: created a key file for secrets at rest; back it up with the database",
      "SECRETS_KEYS is not set while services run as separate processes: every process needs the same keys",
    ]);

    warnings.length = 0;
    chmodSync(join(dir, KEY_FILE_NAME), 0o644);
    serviceSecretBox({ DATA_DIR: dir }, logger)();
    expect(warnings).toEqual(["the secrets key file is readable by others than its owner; chmod 600 it"]);

    warnings.length = 0;
    serviceSecretBox({ SECRETS_KEYS: newSecretKeyEntry("k1"), DATA_DIR: dir, NATS_URL: "nats://bus:4222" }, logger)();
    expect(warnings).toEqual([]);
  });
});
