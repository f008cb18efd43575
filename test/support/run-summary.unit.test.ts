import { describe, expect, it } from "vitest";
import { cpuReport } from "./run-summary.js";

describe("cpuReport", () => {
  it("adds up a file's runs (one per project), and lists the costliest first with the worker's and the children's parts", () => {
    const lines = [
      { file: "/repo/test/a.test.ts", wallMs: 9000, ownMs: 1000, childrenMs: 7000 },
      { file: "/repo/test/b.test.ts", wallMs: 9000, ownMs: 3000, childrenMs: 0 },
      { file: "/repo/test/b.test.ts", wallMs: 9000, ownMs: 3500, childrenMs: 2500 },
      { file: "/repo/test/c.test.ts", wallMs: 1000, ownMs: 200, childrenMs: 0 },
    ];
    expect(cpuReport(lines, "/repo", 2)).toEqual([
      "CPU of the test files: 17.2 s (their workers' and the processes they started; the run's own servers not included)",
      "the 2 costliest files (in the worker + in child processes):",
      "  9.0 s (6.5 s + 2.5 s)  test/b.test.ts (2 runs)",
      "  8.0 s (1.0 s + 7.0 s)  test/a.test.ts",
    ]);
  });

  it("prints nothing without lines", () => {
    expect(cpuReport([], "/repo")).toEqual([]);
  });
});
