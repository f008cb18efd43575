import { parentPort } from "node:worker_threads";
import { READY, type WorkerReply } from "../../runtime/worker-pool.js";
import { type LargeBodyTask, runLargeBodyTask } from "./large-body-work.js";

// A worker thread of the large-body pool (large-bodies.ts): one task at a time, answered in order.
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
