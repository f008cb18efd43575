import { createHash } from "node:crypto";
import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "../runtime/observability/logger.js";
import type { RetryKeyStore } from "./store.js";

/**
 * Retry recognition: a sender that times out and sends the same delivery again must not open a
 * second incident or record twice, and gets the answer the first delivery got (same outcome, so
 * the same status, and the same incident id).
 *
 * Each delivery has a retry key (see retry-keys.ts), held per organization in Postgres for
 * HOLD_SECONDS, so it survives restarts and every replica sees it. The first delivery claims the
 * key, does the work and stores its answer; a retry that arrives while the work runs waits for
 * that answer, one that arrives later reads it. Any receiver plugs in the same way:
 * `retries.once(orgId, key, work)`.
 *
 * - A claim is a lease (LEASE_SECONDS, longer than any call's deadline): if the process holding it
 *   dies, a retry takes the key over once the lease has run out.
 * - When the work fails (the incident core unavailable, say), the claim is released, so the
 *   sender's retry does the work again rather than getting the failure back.
 * - A held answer naming an incident that a person has since resolved or archived no longer
 *   stands (`stillValid`): the spec has the next matching delivery open a new incident then.
 * - A key the sender chose (`Idempotency-Key`) is kept with its body's digest: the same key with
 *   another body is not a retry but a second alert under a reused key, refused with
 *   `RetryKeyReusedError` rather than answered with the first alert's answer (which would drop it).
 */

/** How long a delivery's retry key is held: a retry within this time gets the first answer. */
export const HOLD_SECONDS = 24 * 3600;
/** How long a claim holds before a retry may take it over from a process that died. */
export const LEASE_SECONDS = 30;
const POLL_MS = [20, 50, 100, 200, 250];

export interface RetryRecognition {
  /**
   * Runs `work` once for `key` in the organization within the hold period and answers its
   * result; a retry (at the same time or later) answers the first delivery's result.
   */
  once<T extends JsonObject>(orgId: string, key: string, work: () => Promise<T>, options?: OnceOptions<T>): Promise<T>;
}

export interface OnceOptions<T> {
  /** Ends the wait for a concurrent delivery's answer (the caller's deadline). */
  signal?: AbortSignal;
  /** Whether a held answer still stands; when not, the delivery is treated as a new one. */
  stillValid?: (answer: T) => Promise<boolean>;
  /** The digest of the delivery's body; a key held with another digest is refused. */
  bodyDigest?: string | undefined;
}

/** The key is held for a delivery with another body (see the top of this file). */
export class RetryKeyReusedError extends Error {
  constructor() {
    super("the retry key is held for a delivery with another body");
    this.name = "RetryKeyReusedError";
  }
}

/**
 * Runs each delivery once per retry key and organization, held in intake's store for
 * `HOLD_SECONDS`; a retry within that time gets the first answer.
 */
export function createRetryRecognition(store: RetryKeyStore, logger: Logger): RetryRecognition {
  const times = { holdSeconds: HOLD_SECONDS, leaseSeconds: LEASE_SECONDS };

  return {
    async once<T extends JsonObject>(orgId: string, key: string, work: () => Promise<T>, onceOptions: OnceOptions<T> = {}): Promise<T> {
      const { signal, stillValid, bodyDigest } = onceOptions;
      for (let turn = 0; ; turn++) {
        if (signal?.aborted) throw gaveUp(signal);
        const token = await store.claim(orgId, key, times, bodyDigest);
        if (token) {
          let answer: T;
          try {
            answer = await work();
          } catch (err) {
            await store.release(orgId, key, token).catch((releaseError: unknown) => logger.warn({ err: releaseError }, "could not release a retry key"));
            throw err;
          }
          try {
            await store.answer(orgId, key, token, answer);
          } catch (err) {
            // The work is done; the sender gets its answer. A retry after the lease does it again,
            // which the incident core answers the same: by the attach identity or event id it
            // holds, or by the retry key it kept with the incident this delivery opened.
            logger.error({ err }, "could not store the answer of a delivery for its retries");
          }
          return answer;
        }
        const held = await store.held(orgId, key);
        if (!held) continue;
        if (bodyDigest && held.body_digest && held.body_digest !== bodyDigest) throw new RetryKeyReusedError();
        if (held.state === "answered") {
          // Stored by `once` with the same key: the answer of a delivery of the same route.
          const answer = held.answer as T;
          if (stillValid && !(await stillValid(answer))) {
            await store.release(orgId, key, held.token);
            continue;
          }
          return answer;
        }
        // Another delivery of the same key is being worked on: wait for its answer.
        await sleep(POLL_MS[Math.min(turn, POLL_MS.length - 1)]!, signal);
      }
    },
  };
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(gaveUp(signal!));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function gaveUp(signal: AbortSignal): ConnectError {
  const reason: unknown = signal.reason;
  if (reason instanceof ConnectError) return reason;
  return new ConnectError("the caller gave up waiting for the first delivery's answer", Code.DeadlineExceeded);
}

/** A digest of JSON that does not depend on the order of object keys. */
export function stableDigest(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value)).digest("hex");
}

function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  // Form fields, in their order (a repeated field keeps every value).
  if (value instanceof URLSearchParams) return `form${JSON.stringify([...value.entries()])}`;
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
}
