import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** 64 lowercase hexadecimal characters from the CSPRNG: ingest tokens and receiver secrets. */
export function newHexSecret(): string {
  return randomBytes(32).toString("hex");
}

/** The SHA-256 of a credential: what is stored and looked up, never the credential itself. */
export function sha256(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

/** The SHA-256 of a string, as lowercase hex: how tokens and secrets are stored and looked up. */
export function sha256Hex(value: string): string {
  return sha256(value).toString("hex");
}

/** Compares two buffers in time that does not depend on where they differ. */
export function constantTimeEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}
