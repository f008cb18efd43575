import { setTimeout as sleep } from "node:timers/promises";
import { LARGE_BODY_BYTES } from "./custom-sources/large-bodies.js";
import { ShareExceeded } from "./fair-shares.js";

/** Organizations a process keeps a schedule for before it drops those that are back within their burst. */
const SWEEP_FROM_ORGS = 1_024;

/**
 * Each organization's budget of large bodies (over 64 KiB) per second in this process.
 *
 * Why: however little a rule does, a 1 MiB body costs the process's one event loop several
 * milliseconds (decoding it, keeping 64 KiB of it, writing the incident, collecting the garbage),
 * against well under one for an ordinary alert. Two senders posting such bodies back to back
 * tripled every other organization's latency.
 *
 * The budget shapes rather than refuses: each large body waits its turn (first come, first served)
 * before it is parsed, so the organization's large bodies are handled at `bytesPerSecond`, evenly
 * spaced, however fast they arrive. A large body of an organization that sent none for a while is
 * taken at once. There is no burst on purpose: bodies taken back to back are what held the loop. A refusal
 * would not do: it is answered at once, so a sender that ignores Retry-After sends again at once,
 * and reading bodies only to refuse them costs nearly as much. Waiting takes no CPU, and a sender
 * that waits for its answer is slowed to the budget. Only a body whose turn is further away than
 * `maxWaitMs` (or the caller's deadline) is refused, with the route's "try again" answer and a
 * Retry-After of the seconds to its turn; nothing is recorded, so the sender's retry is the delivery.
 *
 * Implemented as a virtual schedule (the generic cell rate algorithm without a burst): each
 * organization's next free moment advances by each body's bytes at the budget's rate, and a body
 * waits until that moment. Ordinary alerts are never charged. Zero turns it off.
 */
export interface LargeBodyBudget {
  /**
   * Takes `bytes` from the organization's budget: at once within it, after a wait past it; throws
   * ShareExceeded("large-bodies") when the wait would pass `maxWaitMs` or `deadlineMs` (from now).
   */
  charge(orgId: string, bytes: number, options?: { deadlineMs?: number | undefined; signal?: AbortSignal | undefined }): Promise<void>;
  /** Organizations holding a schedule now: for tests that the memory stays bounded. */
  size(): number;
}

export function createLargeBodyBudget(options: { bytesPerSecond: number; maxWaitMs: number; now?: () => number }): LargeBodyBudget {
  const rate = options.bytesPerSecond;
  const now = options.now ?? (() => performance.now());
  /** Each organization's next free moment (ms on `now`'s clock): when its bodies so far are paid for. */
  const freeAt = new Map<string, number>();

  /** Forgets every organization whose bodies are paid for: such an organization is as if never seen. */
  const sweep = (at: number) => {
    for (const [orgId, moment] of freeAt) if (moment <= at) freeAt.delete(orgId);
  };

  return {
    async charge(orgId, bytes, charge = {}) {
      if (rate <= 0 || bytes <= LARGE_BODY_BYTES) return;
      const at = now();
      const moment = Math.max(freeAt.get(orgId) ?? at, at);
      const waitMs = moment - at;
      const allowedMs = Math.min(options.maxWaitMs, charge.deadlineMs ?? Number.POSITIVE_INFINITY);
      if (waitMs > allowedMs) throw new ShareExceeded("large-bodies", Math.max(1, Math.ceil(waitMs / 1000)));
      if (!freeAt.has(orgId) && freeAt.size >= SWEEP_FROM_ORGS) sweep(at);
      // Taken now, so that bodies arriving meanwhile queue behind this one.
      freeAt.set(orgId, moment + (bytes / rate) * 1000);
      if (waitMs > 0) await sleep(waitMs, undefined, { signal: charge.signal });
    },
    size: () => freeAt.size,
  };
}
