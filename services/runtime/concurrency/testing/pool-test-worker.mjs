import { parentPort } from "node:worker_threads";

// A worker for worker-pool.unit.test.ts: answers a task after spinning `spinMs` (forever when
// negative), or fails it, or exits the thread, as the task says.
parentPort.on("message", (task) => {
  if (task.exit) process.exit(3);
  if (task.fail) return parentPort.postMessage({ error: task.fail });
  const until = task.spinMs < 0 ? Number.POSITIVE_INFINITY : performance.now() + (task.spinMs ?? 0);
  while (performance.now() < until) {}
  parentPort.postMessage({ ok: { name: task.name } });
});
parentPort.postMessage({ ready: true });
