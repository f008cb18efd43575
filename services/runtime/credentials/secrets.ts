import { hash, randomBytes, timingSafeEqual } from "node:crypto";

/** 64 lowercase hexadecimal characters from the CSPRNG: ingest tokens and receiver secrets. */
export function newHexSecret(): string {
  return randomBytes(32).toString("hex");
}

/**
 * The SHA-256 of a credential: what is stored and looked up, never the credential itself. Node's
 * one-shot `hash` (strings as UTF-8), not a Hash object: every delivery hashes its ingest token,
 * and building the object took three quarters of the time (about 1.1 µs against 0.3 µs).
 */
export function sha256(value: string): Buffer {
  return hash("sha256", value, "buffer");
}

/** The SHA-256 of a string, as lowercase hex: how tokens and secrets are stored and looked up. */
export function sha256Hex(value: string): string {
  return hash("sha256", value, "hex");
}

/** Compares two buffers in time that does not depend on where they differ. */
export function constantTimeEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}
