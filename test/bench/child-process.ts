import { fork, type ChildProcess } from "node:child_process";

/**
 * Benchmarks run the server under test in a child process, so its CPU is its own and the load
 * generator's is not counted against it. The child announces `{url}` once it listens.
 */
export function startChild(entry: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ child: ChildProcess; url: string }> {
  const child = fork(entry, args, { stdio: "inherit", env });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`child exited with ${code}`)));
    const onMessage = (m: { url?: string }) => {
      if (m.url === undefined) return;
      child.off("message", onMessage);
      resolve({ child, url: m.url });
    };
    child.on("message", onMessage);
  });
}

/** Asks the child to stop ("stop" message) and waits until it has exited. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.send("stop");
  await exited;
}
