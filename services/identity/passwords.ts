import { randomBytes, timingSafeEqual } from "node:crypto";
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { RateLimitedError } from "../runtime/errors.js";

// scrypt (Node's own, RFC 7914) with a per-password salt, by default at OWASP's recommendation
// (N=2^17, r=8, p=1: 128 MiB and a few hundred milliseconds a hash); PASSWORD_SCRYPT_N sets N.
// The parameters are stored with the hash, so a hash made with others still verifies and is
// replaced at the next login.
export const DEFAULT_PARAMS = { N: 131072, r: 8, p: 1 } as const;
const KEY_LENGTH = 32;

/** The parameters new hashes are made with: DEFAULT_PARAMS with the configured N (setPasswordCost). */
let params: { N: number; r: number; p: number } = DEFAULT_PARAMS;
/** The dummy hash of the current parameters, once asked for (dummyHash). */
let dummy: Promise<string> | undefined;

/** Makes new hashes with cost `N` (PASSWORD_SCRYPT_N): set by the identity service at its start. */
export function setPasswordCost(N: number): void {
  if (N === params.N) return;
  // A hash's time is about proportional to N: the queue's estimate follows at once, rather than
  // admitting a burst by the old cost's times (eight times too many, from 2^14 to 2^17).
  pool.rescale(N / params.N);
  params = { ...DEFAULT_PARAMS, N };
  dummy = undefined;
}

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

/**
 * Whose turn a hash takes in the queue: the account it is for, the client address it comes from,
 * and whether that address is one the account has logged in from (see login-throttle.ts).
 */
export interface HashShare {
  account: string;
  address: string;
  known: boolean;
  /**
   * When the caller stops waiting for the answer (performance.now()'s clock), if it does: a hash
   * expected to end after it is refused at once ("retry shortly") instead of answering no one.
   */
  deadlineAt?: number | undefined;
}

/** Work of the service itself and of signed-in admins (setting a password): one share, ahead of the unknown. */
const OWN_WORK: HashShare = { account: "", address: "", known: true };

interface Job {
  id: number;
  message: { id: number; password: string; salt: Uint8Array; keyLength: number; options: object };
  /** 0: a known address (or the service's own work), served first; 1: the rest. */
  lane: number;
  /** Its turn in its lane: after its account's and its address's jobs queued before it. */
  round: number;
  keys: [string, string];
  /** When it was queued, and when a thread took it. */
  queuedAt: number;
  startedAt: number;
  /** Its caller's deadline (HashShare.deadlineAt). */
  deadlineAt: number;
  /** Refuses it once it has waited `maxWaitMs` unstarted, or could no longer end by its deadline. */
  expiry?: NodeJS.Timeout;
  resolve(key: Buffer): void;
  reject(err: Error): void;
}

export const HASH_THREADS = Math.max(1, Math.min(2, availableParallelism() - 1));
/**
 * The longest a hash may expect to wait for a thread (the hashes to finish before a thread is free
 * for it x recent hash time / threads). Past it a login is refused at once (429, retry in a
 * second) instead of queueing behind a flood until the caller's deadline (15 s at the gateway) has
 * passed; on a slow or busy machine the queue is shorter accordingly.
 */
export const MAX_HASH_WAIT_MS = 8_000;
/** The most hashes queued at once, whatever the estimate says: a bound on the queue's memory. */
export const MAX_QUEUED_HASHES = 1_000;

/** Refused for capacity: not a failed login (the caller gives its reservation back). */
export class HashQueueFullError extends RateLimitedError {
  constructor() {
    super("too many password checks in progress; retry shortly", 1);
  }
}

/**
 * The queue is fair per account and per client address, in two lanes. A login from an address its
 * account has logged in from before (and the service's own hashing) goes in the first lane, which is
 * always served first and has a thread more than the second (HASH_THREADS + 1 in all): a flood from
 * addresses that have never logged in to the account they guess at neither holds every thread nor
 * delays the real person. Within a lane each job takes the round after the last queued job
 * of its account and of its address, and rounds are served in order: a flood from one address, or
 * at one account from many addresses, waits behind itself, and anyone else's hash starts within one
 * round. A hash is admitted when its expected wait, counted in that order, stays under
 * MAX_HASH_WAIT_MS.
 */
export function createHashPool(size: number, maxWaitMs = MAX_HASH_WAIT_MS) {
  const queued: Job[] = [];
  // Per lane and key (account or address): its queued jobs and the round of the last one.
  const perKey = new Map<string, { jobs: number; lastRound: number }>();
  // Per lane: the round of the job last started.
  const current = [0, 0];
  const idle: Worker[] = [];
  const running = new Map<Worker, Job>();
  // Jobs of the second lane running: at most `size`, the one thread more is the first lane's.
  let runningUnknown = 0;
  let workers = 0;
  let nextId = 0;
  // Recent time of one hash on one thread: a typical figure for N=2^17 (rescaled when the cost is
  // set) until the first hash is timed, which replaces it.
  let averageMs = 300;
  let timed = false;

  const spawn = (): Worker => {
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    workers++;
    worker.on("message", (answer: { id: number; key?: Uint8Array; error?: string }) => {
      const job = running.get(worker);
      running.delete(worker);
      if (job?.lane === 1) runningUnknown--;
      if (job && job.id === answer.id) {
        // Exponentially weighted: follows a machine that gets busier or quieter within seconds.
        const tookMs = performance.now() - job.startedAt;
        averageMs = timed ? 0.8 * averageMs + 0.2 * tookMs : tookMs;
        timed = true;
        if (answer.error !== undefined) job.reject(new Error(answer.error));
        else job.resolve(Buffer.from(answer.key!));
      }
      idle.push(worker);
      pump();
    });
    worker.on("error", (err) => {
      const job = running.get(worker);
      running.delete(worker);
      if (job?.lane === 1) runningUnknown--;
      workers--;
      job?.reject(err);
      pump();
    });
    return worker;
  };

  /** Whether `a` is served before `b`. */
  const before = (a: Job, b: Job) => a.lane < b.lane || (a.lane === b.lane && (a.round < b.round || (a.round === b.round && a.id < b.id)));

  /** Takes the job at `index` off the queue. */
  const dequeue = (index: number): Job => {
    const [job] = queued.splice(index, 1);
    clearTimeout(job!.expiry);
    for (const key of job!.keys) {
      const entry = perKey.get(key)!;
      if (--entry.jobs === 0) perKey.delete(key);
    }
    return job!;
  };

  /** The next job in turn, taken off the queue, unless it is the second lane's and its threads are busy. */
  const take = (): Job | undefined => {
    let best = -1;
    for (let i = 0; i < queued.length; i++) if (best < 0 || before(queued[i]!, queued[best]!)) best = i;
    if (best < 0 || (queued[best]!.lane === 1 && runningUnknown >= size)) return undefined;
    const job = dequeue(best);
    current[job.lane] = Math.max(current[job.lane]!, job.round);
    return job;
  };

  /** How long `job` may still wait unstarted: its wait bound, or the last moment it could start and end by its deadline. */
  const startWithinMs = (job: Job, at: number) => Math.min(job.queuedAt + maxWaitMs, job.deadlineAt - averageMs) - at;

  /**
   * Refuses a job still waiting at its bound (startWithinMs), whether or not a thread came free
   * meanwhile: on a machine slower than the estimate every thread can stay busy past the caller's
   * deadline, which then heard a timeout instead of "retry shortly".
   */
  const expire = (job: Job) => {
    const index = queued.indexOf(job);
    if (index < 0) return;
    dequeue(index);
    job.reject(new HashQueueFullError());
  };

  const pump = () => {
    while (queued.length > 0 && (idle.length > 0 || workers < size + 1)) {
      const job = take();
      if (!job) return;
      // Waited too long after all (the machine got slower than the estimate, or the first lane
      // went ahead): refused, not started.
      if (startWithinMs(job, performance.now()) < 0) {
        job.reject(new HashQueueFullError());
        continue;
      }
      const worker = idle.pop() ?? spawn();
      if (job.lane === 1) runningUnknown++;
      running.set(worker, job);
      job.startedAt = performance.now();
      worker.postMessage(job.message);
    }
  };

  /** The job `share` would queue, and whether it is admitted. */
  const plan = (share: HashShare) => {
    const lane = share.known ? 0 : 1;
    const keys: [string, string] = [`${lane}\naccount\n${share.account}`, `${lane}\naddress\n${share.address}`];
    let round = current[lane]!;
    for (const key of keys) {
      const entry = perKey.get(key);
      if (entry) round = Math.max(round, entry.lastRound + 1);
    }
    const ahead = queued.filter((other) => other.lane < lane || (other.lane === lane && other.round <= round)).length;
    // Hashes to finish before a thread is free for this one: none while one of its threads is idle.
    const waitFor = lane === 0 ? Math.max(0, ahead + running.size - size) : Math.max(0, ahead + runningUnknown - size + 1);
    const waitMs = (waitFor * averageMs) / size;
    const deadlineAt = share.deadlineAt ?? Number.POSITIVE_INFINITY;
    const admitted = queued.length < MAX_QUEUED_HASHES && waitMs <= maxWaitMs && performance.now() + waitMs + averageMs <= deadlineAt;
    return { lane, keys, round, admitted };
  };

  return {
    /** Multiplies the estimate of one hash's time by `factor`: the cost changed. */
    rescale(factor: number) {
      averageMs *= factor;
    },

    /** Whether a hash for `share` would be admitted now: checked before a login reserves its failure. */
    admits: (share: HashShare) => plan(share).admitted,

    derive(share: HashShare, password: string, salt: Buffer, keyLength: number, options: object): Promise<Buffer> {
      const { lane, keys, round, admitted } = plan(share);
      if (!admitted) return Promise.reject(new HashQueueFullError());
      const job: Job = {
        id: nextId++,
        message: { id: 0, password, salt: new Uint8Array(salt), keyLength, options },
        lane,
        round,
        keys,
        queuedAt: performance.now(),
        startedAt: 0,
        deadlineAt: share.deadlineAt ?? Number.POSITIVE_INFINITY,
        resolve: () => {},
        reject: () => {},
      };
      job.message.id = job.id;
      return new Promise((resolve, reject) => {
        job.resolve = resolve;
        job.reject = reject;
        for (const key of keys) {
          const entry = perKey.get(key);
          if (entry) {
            entry.jobs++;
            entry.lastRound = round;
          } else perKey.set(key, { jobs: 1, lastRound: round });
        }
        queued.push(job);
        job.expiry = setTimeout(expire, Math.max(0, startWithinMs(job, job.queuedAt)), job);
        job.expiry.unref();
        pump();
      });
    },
  };
}

const pool = createHashPool(HASH_THREADS);

/** Whether a hash for `share` would be admitted now (not a promise that it will be). */
export function hashQueueAdmits(share: HashShare): boolean {
  return pool.admits(share);
}

function derive(password: string, salt: Buffer, options: { N: number; r: number; p: number }, share: HashShare): Promise<Buffer> {
  // scrypt needs 128 * N * r bytes; Node refuses anything above maxmem.
  return pool.derive(share, password.normalize("NFKC"), salt, KEY_LENGTH, { ...options, maxmem: 2 * 128 * options.N * options.r });
}

/**
 * The password's scrypt hash with a new salt, in the `scrypt$N$r$p$salt$key` form that is stored.
 * `share` is whose turn in the hashing queue it takes: by default the service's own.
 */
export async function hashPassword(password: string, share: HashShare = OWN_WORK): Promise<string> {
  const salt = randomBytes(16);
  const made = params;
  const key = await derive(password, salt, made, share);
  return `scrypt$${made.N}$${made.r}$${made.p}$${salt.toString("base64")}$${key.toString("base64")}`;
}

/**
 * Whether the password matches the stored hash, compared in constant time; a malformed hash, or
 * one asking for more work than both today's cost and the default one, never matches. `share` (the
 * login's account and client address) is whose turn in the hashing queue it takes;
 * HashQueueFullError when refused.
 */
export async function verifyPassword(password: string, stored: string, share: HashShare = OWN_WORK): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = stored.split("$");
  if (scheme !== "scrypt" || !salt || !key) return false;
  const N = Number(n);
  // A stored hash never asks for more work than today's cost or the default one (those made before
  // a lower PASSWORD_SCRYPT_N still verify), nor for a malformed amount.
  const most = Math.max(params.N, DEFAULT_PARAMS.N);
  if (!Number.isInteger(N) || N < 2 || N > most || Number(r) !== DEFAULT_PARAMS.r || Number(p) !== DEFAULT_PARAMS.p) return false;
  const expected = Buffer.from(key, "base64");
  const actual = await derive(password, Buffer.from(salt, "base64"), { N, r: Number(r), p: Number(p) }, share);
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

/** A hash made with other parameters than today's, to be replaced after a successful login. */
export function needsRehash(stored: string): boolean {
  const [scheme, n, r, p] = stored.split("$");
  return scheme !== "scrypt" || Number(n) !== params.N || Number(r) !== params.r || Number(p) !== params.p;
}

/**
 * A hash of nothing with today's parameters, verified against when the email is unknown so both
 * answers take as long. Made once, when first asked for: the identity service asks at its start,
 * so that no login waits for it (a process's start used to wait for it while loading this module).
 */
export function dummyHash(): Promise<string> {
  dummy ??= hashPassword(randomBytes(16).toString("hex")).catch((err) => {
    // Refused for capacity, say: the next unknown email asks again.
    dummy = undefined;
    throw err;
  });
  return dummy;
}
