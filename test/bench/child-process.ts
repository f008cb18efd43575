import { fork, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";

/**
 * Benchmarks run the server under test in a child process, so its CPU is its own and the load
 * generator's is not counted against it. The child announces `{url}` once it listens.
 */
export function startChild(
  entry: string,
  args: string[],
  options: { nodeOptions?: string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<{ child: ChildProcess; url: string; metricsUrl?: string }> {
  const child = fork(entry, args, {
    stdio: "inherit",
    execArgv: [...process.execArgv, ...(options.nodeOptions ?? [])],
    env: withoutBenchVariables(options.env ?? process.env),
  });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`child exited with ${code}`)));
    const onMessage = (m: { url?: string; metricsUrl?: string }) => {
      if (m.url === undefined) return;
      child.off("message", onMessage);
      resolve({ child, url: m.url, ...(m.metricsUrl ? { metricsUrl: m.metricsUrl } : {}) });
    };
    child.on("message", onMessage);
  });
}

/**
 * The environment without the benchmarks' own variables (INTAKE_BENCH_SECONDS, BENCH_PROFILE_DIR,
 * ...): the benchmark reads them, and the service under test would warn that it reads no such
 * variable.
 */
export function withoutBenchVariables(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !/(^|_)BENCH(_|$)/.test(name)));
}

/** Asks the child to stop ("stop" message) and waits until it has exited. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.send("stop");
  await exited;
}

/**
 * The child's CPU time so far ("cpu" message): on a shared machine, CPU per request is what the
 * code costs. Undefined from a child that does not answer it (an older checkout's).
 */
export function cpuOf(child: ChildProcess): Promise<NodeJS.CpuUsage | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.off("message", onMessage);
      resolve(undefined);
    }, 2000);
    const onMessage = (m: { cpu?: NodeJS.CpuUsage }) => {
      if (!m.cpu) return;
      clearTimeout(timer);
      child.off("message", onMessage);
      resolve(m.cpu);
    };
    child.on("message", onMessage);
    child.send("cpu");
  });
}

/** CPU seconds of a process so far, from /proc: in all (user + system), and in the kernel alone. */
export function cpuTimes(pid: number): { total: number; kernel: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { total: (Number(fields[11]) + Number(fields[12])) / 100, kernel: Number(fields[12]) / 100 };
  } catch {
    return { total: 0, kernel: 0 };
  }
}
