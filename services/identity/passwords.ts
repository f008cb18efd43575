import { randomBytes, timingSafeEqual } from "node:crypto";
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { RateLimitedError } from "../runtime/errors.js";

// scrypt (Node's own, RFC 7914) with a per-password salt, at OWASP's recommendation
// (N=2^17, r=8, p=1: 128 MiB and a few hundred milliseconds a hash). The parameters are stored
// with the hash, so a hash made with older ones still verifies and is replaced at the next login.
export const PARAMS = { N: 131072, r: 8, p: 1 } as const;
const KEY_LENGTH = 32;
// scrypt needs 128 * N * r bytes; Node refuses anything above maxmem.
const MAX_MEMORY = 2 * 128 * PARAMS.N * PARAMS.r;

/**
 * Hashing runs on worker threads of its own, never on the libuv pool: a login flood filling the
 * four libuv threads with scrypt would stall every DNS lookup (getaddrinfo runs there) and file
 * read of the process, and with them the outbound calls. A fixed number of workers also caps the
 * memory scrypt takes (128 MiB each); further hashes wait their turn in the queue.
 */
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { scryptSync } = require("node:crypto");
parentPort.on("message", ({ id, password, salt, keyLength, options }) => {
  try {
    const key = scryptSync(password, Buffer.from(salt), keyLength, options);
    parentPort.postMessage({ id, key });
  } catch (err) {
    parentPort.postMessage({ id, error: err instanceof Error ? err.message : String(err) });
  }
});
`;

interface Job {
  id: number;
  message: { id: number; password: string; salt: Uint8Array; keyLength: number; options: object };
  /** When it was queued, and when a thread took it. */
  queuedAt: number;
  startedAt: number;
  resolve(key: Buffer): void;
  reject(err: Error): void;
}

export const HASH_THREADS = Math.max(1, Math.min(2, availableParallelism() - 1));
/**
 * The longest a hash may expect to wait for a thread (queue length x recent hash time / threads).
 * Past it a login is refused at once (429, retry in a second) instead of queueing behind a flood
 * until the caller's deadline (15 s at the gateway) has passed; on a slow or busy machine the
 * queue is shorter accordingly.
 */
export const MAX_HASH_WAIT_MS = 8_000;

const busy = () => new RateLimitedError("too many password checks in progress; retry shortly", 1);

/**
 * The queue is shared fairly between owners (the client address of a login): each owner has a
 * queue of its own and threads take from them in turn, so a flood from one address waits behind
 * itself, and another address's hash starts within one round. A hash is admitted when its expected
 * wait, counted in that order, stays under MAX_HASH_WAIT_MS; so one address can fill the queue only
 * while nobody else needs it.
 */
function createHashPool(size: number) {
  const queues = new Map<string, Job[]>();
  // Owners with queued jobs, in the order they are served; the first is served next.
  const rotation: string[] = [];
  const idle: Worker[] = [];
  const running = new Map<Worker, Job>();
  let workers = 0;
  let nextId = 0;
  // Recent time of one hash on one thread; starts at a typical figure for N=2^17.
  let averageMs = 300;

  const spawn = (): Worker => {
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    workers++;
    worker.on("message", (answer: { id: number; key?: Uint8Array; error?: string }) => {
      const job = running.get(worker);
      running.delete(worker);
      if (job && job.id === answer.id) {
        // Exponentially weighted: follows a machine that gets busier or quieter within seconds.
        averageMs = 0.8 * averageMs + 0.2 * (performance.now() - job.startedAt);
        if (answer.error !== undefined) job.reject(new Error(answer.error));
        else job.resolve(Buffer.from(answer.key!));
      }
      idle.push(worker);
      pump();
    });
    worker.on("error", (err) => {
      const job = running.get(worker);
      running.delete(worker);
      workers--;
      job?.reject(err);
      pump();
    });
    return worker;
  };

  /** The next job in turn, taken off its owner's queue. */
  const take = (): Job | undefined => {
    const owner = rotation.shift();
    if (owner === undefined) return undefined;
    const queue = queues.get(owner)!;
    const job = queue.shift()!;
    if (queue.length > 0) rotation.push(owner);
    else queues.delete(owner);
    return job;
  };

  const pump = () => {
    while (rotation.length > 0) {
      const owner = rotation[0]!;
      const job = queues.get(owner)![0]!;
      // Waited too long after all (the machine got slower than the estimate): refused, not started.
      if (performance.now() - job.queuedAt > MAX_HASH_WAIT_MS) {
        take();
        job.reject(busy());
        continue;
      }
      const worker = idle.pop() ?? (workers < size ? spawn() : undefined);
      if (!worker) return;
      take();
      running.set(worker, job);
      job.startedAt = performance.now();
      worker.postMessage(job.message);
    }
  };

  return {
    derive(owner: string, password: string, salt: Buffer, keyLength: number, options: object): Promise<Buffer> {
      // Served in turn, this job waits for every owner's jobs up to its own place in its queue.
      const place = (queues.get(owner)?.length ?? 0) + 1;
      let ahead = 0;
      for (const [other, queue] of queues) if (other !== owner) ahead += Math.min(queue.length, place);
      if (((ahead + place) * averageMs) / size > MAX_HASH_WAIT_MS) return Promise.reject(busy());
      return new Promise((resolve, reject) => {
        const id = nextId++;
        let queue = queues.get(owner);
        if (!queue) {
          queue = [];
          queues.set(owner, queue);
          rotation.push(owner);
        }
        queue.push({
          id,
          message: { id, password, salt: new Uint8Array(salt), keyLength, options },
          queuedAt: performance.now(),
          startedAt: 0,
          resolve,
          reject,
        });
        pump();
      });
    },
  };
}

const pool = createHashPool(HASH_THREADS);

function derive(password: string, salt: Buffer, options: { N: number; r: number; p: number }, owner: string): Promise<Buffer> {
  return pool.derive(owner, password.normalize("NFKC"), salt, KEY_LENGTH, { ...options, maxmem: MAX_MEMORY });
}

/**
 * The password's scrypt hash with a new salt, in the `scrypt$N$r$p$salt$key` form that is stored.
 */
export async function hashPassword(password: string, owner = ""): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, PARAMS, owner);
  return `scrypt$${PARAMS.N}$${PARAMS.r}$${PARAMS.p}$${salt.toString("base64")}$${key.toString("base64")}`;
}

/**
 * Whether the password matches the stored hash, compared in constant time; a malformed hash, or one
 * asking for more work than today's parameters, never matches. `owner` (the client address of a
 * login) is whose share of the hashing queue it takes.
 */
export async function verifyPassword(password: string, stored: string, owner = ""): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = stored.split("$");
  if (scheme !== "scrypt" || !salt || !key) return false;
  const N = Number(n);
  // A stored hash never asks for more work than today's parameters (nor for a malformed amount).
  if (!Number.isInteger(N) || N < 2 || N > PARAMS.N || Number(r) !== PARAMS.r || Number(p) !== PARAMS.p) return false;
  const expected = Buffer.from(key, "base64");
  const actual = await derive(password, Buffer.from(salt, "base64"), { N, r: Number(r), p: Number(p) }, owner);
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

/** A hash made with older parameters than today's, to be replaced after a successful login. */
export function needsRehash(stored: string): boolean {
  const [scheme, n, r, p] = stored.split("$");
  return scheme !== "scrypt" || Number(n) !== PARAMS.N || Number(r) !== PARAMS.r || Number(p) !== PARAMS.p;
}

/** A hash of nothing, verified against when the email is unknown so both answers take as long. */
export const DUMMY_HASH = await hashPassword(randomBytes(16).toString("hex"));
