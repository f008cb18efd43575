import { appendFileSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, expect } from "vitest";

/**
 * With TEST_CPU_LOG=<file> (vitest.config.ts adds this setup file then), each test file appends
 * one line to <file>: the CPU its worker spent while it ran (the apps it runs in-process and their
 * threads included) and the CPU of the child processes that ended meanwhile (the service processes,
 * embedded Postgres servers, browsers and commands it started, their own children included). The
 * run's own Postgres and NATS servers are counted in no file. The reporter
 * (test/support/run-summary.ts) prints the files that cost the most.
 */
export interface FileCpu {
  file: string;
  wallMs: number;
  ownMs: number;
  childrenMs: number;
}

/** Children's CPU (those waited for) from /proc/self/stat, in ms; 0 where /proc is missing. */
function childrenCpuMs(): number {
  try {
    const fields = readFileSync("/proc/self/stat", "utf8").split(") ")[1]!.split(" ");
    // cutime and cstime, in clock ticks (100 a second on Linux).
    return (Number(fields[13]) + Number(fields[14])) * 10;
  } catch {
    return 0;
  }
}

let startedAt = 0;
let own = process.cpuUsage();
let children = 0;

beforeAll(() => {
  startedAt = performance.now();
  own = process.cpuUsage();
  children = childrenCpuMs();
});

afterAll(() => {
  const used = process.cpuUsage(own);
  const line: FileCpu = {
    file: expect.getState().testPath ?? "unknown",
    wallMs: Math.round(performance.now() - startedAt),
    ownMs: Math.round((used.user + used.system) / 1000),
    childrenMs: childrenCpuMs() - children,
  };
  appendFileSync(process.env.TEST_CPU_LOG!, `${JSON.stringify(line)}\n`);
});
