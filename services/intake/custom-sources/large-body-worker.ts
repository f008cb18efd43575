import { setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { READY, type WorkerReply } from "../../runtime/concurrency/worker-pool.js";
import { type LargeBodyTask, runLargeBodyTask } from "./large-body-work.js";

// A worker thread of the large-body pool (large-bodies.ts): one task at a time, answered in order.

// Below the event loop's priority: on Linux this names the calling thread alone, so when the cores
// are short the loop every organization's deliveries wait on is served first, and large bodies
// wait. Where the system refuses (another OS, a container without the right), they share equally.
try {
  setPriority(10);
} catch {}
parentPort!.on("message", (task: LargeBodyTask) => {
  let reply: WorkerReply;
  try {
    reply = { ok: runLargeBodyTask(task) };
  } catch (err) {
    reply = { error: err instanceof Error ? err.message : String(err) };
  }
  parentPort!.postMessage(reply);
});
parentPort!.postMessage(READY);
