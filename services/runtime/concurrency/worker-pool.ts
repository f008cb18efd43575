import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";

/**
 * A small pool of worker threads for CPU-heavy work the event loop must not do itself (a large
 * body's parsing and mapping): the loop only hands bytes over and gets a compact answer back.
 *
 * Bounded everywhere: `workers` threads, each running one task at a time; at most `maxQueued`
 * tasks holding at most `maxQueuedBytes` wait (past those, `run` refuses at once with PoolFull);
 * a task that takes longer than `taskMs` has its thread terminated and replaced, and is answered
 * with TaskTimedOut. Waiting tasks are served fairly by key (an organization): one key's backlog
 * waits behind its own tasks, never in front of another key's, as in fair-shares.ts.
 */
export interface WorkerPoolOptions {
  /** The worker's module: see workerEntry. */
  entry: WorkerEntry;
  workers: number;
  taskMs: number;
  maxQueued: number;
  maxQueuedBytes: number;
}

/** Refused at once: the queue is at its bound in tasks or bytes. */
export class PoolFull extends Error {
  override name = "PoolFull";
}

/** The task ran past the pool's wall bound; its thread was terminated. */
export class TaskTimedOut extends Error {
  override name = "TaskTimedOut";
}

/** The task's thread failed (it exited or threw outside the task's handler). */
export class WorkerFailed extends Error {
  override name = "WorkerFailed";
}

interface Task {
  key: string;
  input: unknown;
  bytes: number;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

interface Slot {
  worker: Worker;
  /** Whether the thread has loaded its module (it posts READY): only then is it given tasks, so its start never counts against a task's bound. */
  ready: boolean;
  task?: Task;
  timer?: NodeJS.Timeout;
}

/** What a worker posts back for a task: its answer, or the message of what it threw. */
export type WorkerReply = { ok: unknown } | { error: string };

/** What a worker posts once, when its module has loaded and it takes tasks. */
export const READY = { ready: true } as const;

export interface WorkerPool {
  /** Runs `input` (posted by structured clone) on a thread, in `key`'s turn; `bytes` is what it holds while queued. */
  run<T>(key: string, input: unknown, bytes: number): Promise<T>;
  /** What is held now: for metrics and for tests that nothing is left behind. */
  state(): { busy: number; queued: number; queuedBytes: number; replaced: number };
  close(): Promise<void>;
}

/**
 * The worker's module beside `from` (an `import.meta.url`): the compiled `.js` file in the image,
 * or under tsx (tests, `npm start`) the `.ts` file, which the thread loads through tsx's loader
 * registered in the thread itself (a thread does not reliably inherit its process's loader).
 */
export function workerEntry(from: string, name: string): WorkerEntry {
  if (!from.endsWith(".ts")) return { url: new URL(`./${name}.js`, from) };
  const url = new URL(`./${name}.ts`, from).href;
  // Resolved here, from this checkout: a thread's script resolves bare names from the working directory.
  const tsx = new URL("dist/esm/api/index.mjs", pathToFileURL(createRequire(from).resolve("tsx/package.json"))).href;
  return { code: `import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${JSON.stringify(url)}); });` };
}

/** A worker's module: a file, or a script that loads it (see workerEntry). */
export type WorkerEntry = { url: URL } | { code: string };

export function createWorkerPool(options: WorkerPoolOptions): WorkerPool {
  const slots: Slot[] = [];
  /** Waiting tasks by key, in the order keys are served: a served key goes to the back. */
  const queues = new Map<string, Task[]>();
  let queued = 0;
  let queuedBytes = 0;
  let replaced = 0;
  let closed = false;

  function spawn(): Slot {
    const worker = "url" in options.entry ? new Worker(options.entry.url) : new Worker(options.entry.code, { eval: true });
    // An idle thread never keeps the process alive.
    worker.unref();
    const slot: Slot = { worker, ready: false };
    worker.on("message", (reply: WorkerReply | typeof READY) => {
      if ("ready" in reply) {
        slot.ready = true;
        return next(slot);
      }
      const task = finish(slot);
      if (!task) return;
      if ("ok" in reply) task.resolve(reply.ok);
      else task.reject(new WorkerFailed(reply.error));
      next(slot);
    });
    const failed = (err: Error) => {
      if (!slots.includes(slot)) return;
      if (!slot.ready) {
        // A thread that cannot even start would fail again at once: what waits is refused, and
        // the next task tries a fresh thread.
        slots.splice(slots.indexOf(slot), 1);
        for (let task = take(); task; task = take()) task.reject(new WorkerFailed(`the worker thread could not start: ${err.message}`));
        return;
      }
      finish(slot)?.reject(new WorkerFailed(`the worker thread failed: ${err.message}`));
      replace(slot);
    };
    worker.on("error", failed);
    worker.on("exit", (code) => failed(new Error(`exited with code ${code}`)));
    return slot;
  }

  function finish(slot: Slot): Task | undefined {
    const task = slot.task;
    clearTimeout(slot.timer);
    slot.task = undefined;
    slot.timer = undefined;
    if (task) slot.worker.unref();
    return task;
  }

  /** Ends a thread that ran over or failed, and starts another in its place. */
  function replace(slot: Slot): void {
    const index = slots.indexOf(slot);
    if (index < 0) return;
    slots.splice(index, 1);
    void slot.worker.terminate();
    replaced++;
    if (closed) return;
    const fresh = spawn();
    slots.push(fresh);
    next(fresh);
  }

  /** The next task in fair order: the first key's oldest, that key then to the back. */
  function take(): Task | undefined {
    for (const [key, tasks] of queues) {
      const task = tasks.shift()!;
      queues.delete(key);
      if (tasks.length > 0) queues.set(key, tasks);
      queued -= 1;
      queuedBytes -= task.bytes;
      return task;
    }
    return undefined;
  }

  function next(slot: Slot): void {
    if (slot.task || !slot.ready || closed) return;
    const task = take();
    if (!task) return;
    start(slot, task);
  }

  function start(slot: Slot, task: Task): void {
    slot.task = task;
    slot.worker.ref();
    slot.timer = setTimeout(() => {
      finish(slot)?.reject(new TaskTimedOut(`ran past its time bound of ${options.taskMs} ms`));
      replace(slot);
    }, options.taskMs);
    slot.worker.postMessage(task.input);
  }

  return {
    run<T>(key: string, input: unknown, bytes: number): Promise<T> {
      if (closed) return Promise.reject(new WorkerFailed("the worker pool is closed"));
      while (slots.length < options.workers) slots.push(spawn());
      return new Promise<T>((resolve, reject) => {
        const task: Task = { key, input, bytes, resolve: resolve as (value: unknown) => void, reject };
        const idle = queued === 0 ? slots.find((slot) => slot.ready && !slot.task) : undefined;
        if (idle) return start(idle, task);
        if (queued >= options.maxQueued || queuedBytes + bytes > options.maxQueuedBytes) {
          return reject(new PoolFull(`${queued} tasks holding ${queuedBytes} bytes are already waiting for a worker thread`));
        }
        const tasks = queues.get(key);
        if (tasks) tasks.push(task);
        else queues.set(key, [task]);
        queued += 1;
        queuedBytes += bytes;
      });
    },
    state: () => ({ busy: slots.filter((slot) => slot.task).length, queued, queuedBytes, replaced }),
    async close() {
      closed = true;
      for (let task = take(); task; task = take()) task.reject(new WorkerFailed("the worker pool is closed"));
      const ending = slots.splice(0);
      for (const slot of ending) finish(slot)?.reject(new WorkerFailed("the worker pool is closed"));
      await Promise.all(ending.map((slot) => slot.worker.terminate()));
    },
  };
}
