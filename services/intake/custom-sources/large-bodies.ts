import { ShareExceeded } from "../fair-shares.js";
import type { Logger } from "../../runtime/observability/logger.js";
import { createWorkerPool, PoolFull, workerEntry, type WorkerPool } from "../../runtime/concurrency/worker-pool.js";
import { digestOfBytes } from "../sources/normalized-alert.js";
import type { MappingResult } from "../../cel/cel-mapping.js";
import { SANDBOX_LIMITS } from "../../cel/cel-meter.js";
import { KEPT_BODY_BYTES } from "./custom-source-records.js";
import { UnprocessablePayloadError } from "../../runtime/errors.js";
import { InvalidUtf8Error, parseTriggerBody } from "../request-body.js";
import type { DeliverAnswer, DeliverTask, EvaluateTask, LargeBodyTask, ParseAnswer } from "./large-body-work.js";

/**
 * A custom-source body larger than this is parsed, kept and mapped on a worker thread: its cost
 * (decoding, JSON.parse, the depth check, the kept copy, the digest, the rules) would otherwise
 * hold the event loop every other organization's deliveries wait on. Smaller bodies stay on the
 * loop, where handing them over would cost more than the work.
 */
export const LARGE_BODY_BYTES = 64 * 1024;

/**
 * Whether a value the event loop holds parsed is over `limit` bytes as JSON, about: its strings'
 * and keys' lengths and a few bytes a value. It stops as soon as it is over, so a large value costs
 * no more than a small one to measure.
 */
export function exceedsBytes(value: unknown, limit: number): boolean {
  return jsonBytesUpTo(value, limit) > limit;
}

/** About the bytes of `value` written as JSON, counted as exceedsBytes does, up to just past `limit`. */
export function jsonBytesUpTo(value: unknown, limit: number): number {
  let size = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next === "string") size += next.length + 2;
    else if (Array.isArray(next)) {
      size += 2 + next.length;
      for (const item of next) pending.push(item);
    } else if (next !== null && typeof next === "object") {
      for (const [key, item] of Object.entries(next)) {
        size += key.length + 4;
        pending.push(item);
      }
    } else size += 8;
    if (size > limit) return size;
  }
  return size;
}

/**
 * A thread's wall bound for one task: the rules' own time bound (checked in the meter) plus the
 * parsing of a 1 MiB body on a loaded machine. A thread past it is terminated and replaced.
 */
export const LARGE_BODY_TASK_MS = SANDBOX_LIMITS.evaluationMs + 1_000;
/** Tasks and bytes that may wait for a thread: past either, the delivery is refused at once (429, Retry-After). */
export const LARGE_BODY_QUEUE = { tasks: 256, bytes: 64 * 1024 * 1024 } as const;

/**
 * A large body the event loop has not parsed: a worker thread reads it for the mapping, and again
 * for a grouping override's attach key. `bodyDigest` is set by the mapping when asked for.
 */
export class OffloadedBody {
  bodyDigest: string | undefined;
  constructor(
    readonly bytes: Uint8Array,
    readonly contentType: string,
    private readonly evaluate: (expression: string) => Promise<MappingResult>,
  ) {}

  /** A grouping override's attach-key expression over this body, on a worker thread. */
  attachKey(expression: string): Promise<MappingResult> {
    return this.evaluate(expression);
  }
}

export type LargeBodies = ReturnType<typeof createLargeBodies>;

/** The large-body threads of one intake process (INTAKE_LARGE_BODY_WORKERS), fair per organization. */
export function createLargeBodies(options: { workers: number; logger?: Logger | undefined }) {
  let pool: WorkerPool | undefined;
  // Started at the first large body: most processes never see one.
  const threads = () =>
    (pool ??= createWorkerPool({
      entry: workerEntry(import.meta.url, "large-body-worker"),
      workers: options.workers,
      taskMs: LARGE_BODY_TASK_MS,
      maxQueued: LARGE_BODY_QUEUE.tasks,
      maxQueuedBytes: LARGE_BODY_QUEUE.bytes,
    }));

  /** Runs a task in the organization's turn; a full queue is this process's overload (429 / 503 with Retry-After). */
  async function run<T>(orgId: string, task: LargeBodyTask, bytes: number): Promise<T> {
    try {
      return await threads().run<T>(orgId, task, bytes);
    } catch (err) {
      if (err instanceof PoolFull) throw new ShareExceeded("overload", 1);
      throw err;
    }
  }

  return {
    /**
     * The delivery's body parsed, kept and mapped on a thread. A thread that fails or runs past its
     * bound ends in a mapping error (the default incident), as an evaluation past its time does.
     */
    async deliver(orgId: string, task: Omit<DeliverTask, "kind">): Promise<DeliverAnswer> {
      try {
        return await run<DeliverAnswer>(orgId, { kind: "deliver", ...task }, task.bytes.byteLength);
      } catch (err) {
        if (err instanceof ShareExceeded) throw err;
        // A thread that ran over or failed was replaced; the delivery opens the default incident.
        options.logger?.warn({ orgId, source: task.source.id, bytes: task.bytes.byteLength, err: String(err) }, "a large body's mapping failed on its thread");
        const text = Buffer.from(task.bytes.buffer, task.bytes.byteOffset, task.bytes.byteLength).subarray(0, KEPT_BODY_BYTES).toString("utf8");
        return {
          kept: { body: text, truncated: true },
          result: { verdicts: [], warnings: [], error: `the mapping ${(err as Error).message}` },
          rawDigest: digestOfBytes(task.bytes),
        };
      }
    },

    /** The body as the delivery path holds it, its grouping overrides evaluated on a thread. */
    offloaded(orgId: string, bytes: Uint8Array, contentType: string): OffloadedBody {
      return new OffloadedBody(bytes, contentType, async (expression) => {
        try {
          const answer = await run<MappingResult | Extract<DeliverAnswer, { refused: unknown }>>(
            orgId,
            { kind: "attach-key", bytes, contentType, expression },
            bytes.byteLength,
          );
          if ("refused" in answer) return { verdicts: [], warnings: [], error: answer.refused.details || answer.refused.message };
          return answer;
        } catch (err) {
          if (err instanceof ShareExceeded) throw err;
          return { verdicts: [], warnings: [], error: `the attach key ${(err as Error).message}` };
        }
      });
    },

    /**
     * Rules over a body the event loop holds parsed and found over LARGE_BODY_BYTES (exceedsBytes),
     * on a thread in the organization's turn: a preview, a grouping override over a built-in
     * source's alert. A thread that fails or runs past its bound is a mapping error, as an
     * evaluation past its time is; a full queue is ShareExceeded (the caller's 429 or 503 with
     * Retry-After).
     */
    async evaluate(orgId: string, task: Omit<EvaluateTask, "kind">): Promise<MappingResult> {
      try {
        return await run<MappingResult>(orgId, { kind: "evaluate", ...task }, LARGE_BODY_BYTES);
      } catch (err) {
        if (err instanceof ShareExceeded) throw err;
        options.logger?.warn({ orgId, err: String(err) }, "rules over a large body failed on their thread");
        return { verdicts: [], warnings: [], error: `the mapping ${(err as Error).message}` };
      }
    },

    /**
     * A built-in route's JSON body over LARGE_BODY_BYTES, read on a thread in the organization's
     * turn, with parseTriggerBody's answers (its errors thrown again as they were). A thread that
     * fails or runs past its bound leaves the reading to the event loop: never a lost delivery.
     */
    async parse(orgId: string, bytes: Uint8Array, contentType: string): Promise<unknown> {
      let answer: ParseAnswer;
      try {
        answer = await run<ParseAnswer>(orgId, { kind: "parse", bytes, contentType }, bytes.byteLength);
      } catch (err) {
        if (err instanceof ShareExceeded) throw err;
        options.logger?.warn(
          { orgId, bytes: bytes.byteLength, err: String(err) },
          "a large body could not be read on its thread; reading it on the event loop",
        );
        return parseTriggerBody(bytes, contentType, { allowForm: false });
      }
      if ("value" in answer) return answer.value;
      if ("invalidUtf8" in answer.refused) throw new InvalidUtf8Error();
      throw new UnprocessablePayloadError(answer.refused.message, answer.refused.details);
    },

    state: () => pool?.state() ?? { busy: 0, queued: 0, queuedBytes: 0, replaced: 0 },
    async close(): Promise<void> {
      await pool?.close();
    },
  };
}
