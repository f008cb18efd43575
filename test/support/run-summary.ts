import { readFileSync, writeFileSync } from "node:fs";
import { constants } from "node:os";
import { relative } from "node:path";
import type { FileCpu } from "./file-cpu.js";
import type { Reporter, SerializedError, TestCase, TestModule, TestRunEndReason, TestSuite, Vitest } from "vitest/node";

/**
 * What a test run ended with, beyond the counts: every skipped test with its reason, and every
 * cause vitest fails a run for besides a failed test (an error outside any test, such as an
 * unhandled rejection after a test ended; a file that failed to load or whose hooks failed; an
 * interrupted run). `npm test` (scripts/test.sh) prints its closing line from it, so a run that
 * exits non-zero with 0 failed says why.
 */
export interface RunSummary {
  passed: number;
  failed: number;
  /**
   * Every failed test with the first line of its first error: the closing lines list them last, so
   * a log read from its end (a CI page) names them after the image build's output.
   */
  failures?: { project: string; file: string; name: string; error: string }[];
  skipped: { project: string; file: string; name: string; reason: string }[];
  /**
   * Tests meant to run that never did, because their file or a hook before them failed: vitest
   * counts them as skipped, and the run fails with "0 failed" unless they are named apart.
   */
  notRun: { project: string; file: string; name: string }[];
  /** Tests left out because their name does not match `-t`: counted, not listed. */
  filteredOut: number;
  /** Errors outside any test: vitest fails the run for each. */
  unhandledErrors: string[];
  /** Files or suites that failed outside their tests (import, beforeAll/afterAll). */
  fileErrors: { project: string; file: string; error: string }[];
  reason: TestRunEndReason;
  /** Each file's own duration, by project: where the run's time goes. */
  files?: { project: string; file: string; ms: number }[];
}

function firstLine(error: SerializedError): string {
  return `${error.name ?? "Error"}: ${error.message ?? String(error)}`.split("\n")[0]!;
}

function describeError(error: SerializedError): string {
  const where = [error.VITEST_TEST_PATH, error.VITEST_TEST_NAME].filter(Boolean).join(" > ");
  const after = error.VITEST_AFTER_ENV_TEARDOWN ? " (after the file's tests ended)" : "";
  return `${firstLine(error)}${where ? ` [in ${where}]` : ""}${after}`;
}

/** Whether the test's file or a suite around it failed (a hook, an import), which stops its tests. */
function failedAround(test: TestCase): boolean {
  for (let parent: TestSuite | TestModule = test.parent; ; parent = parent.parent) {
    if (parent.errors().length > 0) return true;
    if (parent.type === "module") return false;
  }
}

/** The name `-t` is matched against: the suites' and the test's names, joined by spaces. */
function nameForFilter(test: TestCase): string {
  const names = [test.name];
  for (let parent: TestSuite | TestModule = test.parent; parent.type === "suite"; parent = parent.parent) names.unshift(parent.name);
  return names.join(" ");
}

export function summarize(
  testModules: ReadonlyArray<TestModule>,
  unhandledErrors: ReadonlyArray<SerializedError>,
  reason: TestRunEndReason,
  namePattern?: RegExp,
): RunSummary {
  const summary: RunSummary = {
    passed: 0,
    failed: 0,
    failures: [],
    skipped: [],
    notRun: [],
    filteredOut: 0,
    unhandledErrors: unhandledErrors.map(describeError),
    fileErrors: [],
    reason,
    files: [],
  };
  for (const module of testModules) {
    const project = module.project.name;
    const file = module.relativeModuleId;
    summary.files!.push({ project, file, ms: Math.round(module.diagnostic().duration) });
    for (const error of module.errors()) summary.fileErrors.push({ project, file, error: describeError(error) });
    for (const suite of module.children.allSuites()) {
      for (const error of suite.errors()) summary.fileErrors.push({ project, file, error: `${suite.fullName}: ${describeError(error)}` });
    }
    for (const test of module.children.allTests()) {
      const result = test.result();
      if (result.state === "passed") summary.passed++;
      else if (result.state === "failed") {
        summary.failed++;
        const error = result.errors[0];
        summary.failures!.push({ project, file, name: test.fullName, error: error ? firstLine(error) : "no error recorded" });
      } else if (result.state === "skipped" && result.note === undefined && test.options.mode === "run" && failedAround(test)) {
        summary.notRun.push({ project, file, name: test.fullName });
      } else if (result.state === "skipped" && namePattern && test.options.mode === "skip" && !namePattern.test(nameForFilter(test))) {
        summary.filteredOut++;
      } else if (result.state === "skipped") {
        const reason = result.note ?? (test.options.mode === "todo" ? "todo" : `no reason given (${test.options.mode})`);
        summary.skipped.push({ project, file, name: test.fullName, reason });
      }
    }
  }
  return summary;
}

/** Why vitest fails a run other than a failed test; empty when it has no such cause. */
export function otherCauses(summary: RunSummary): string[] {
  const causes: string[] = [];
  if (summary.unhandledErrors.length) causes.push(`${summary.unhandledErrors.length} error(s) outside any test: ${summary.unhandledErrors.join("; ")}`);
  for (const f of summary.fileErrors) {
    const notRun = summary.notRun.filter((t) => t.file === f.file && t.project === f.project).length;
    causes.push(`${f.file} (${f.project}) failed outside its tests${notRun ? ` (${notRun} of them never ran)` : ""}: ${f.error}`);
  }
  if (summary.reason === "interrupted") causes.push("the run was interrupted");
  return causes;
}

/** The failed tests, one per line, for the closing lines; empty when none failed. */
export function failureList(summary: RunSummary | undefined): string[] {
  const failures = summary?.failures ?? [];
  if (failures.length === 0) return [];
  return ["failed:", ...failures.map((f) => `  - ${f.file} (${f.project}) > ${f.name}: ${f.error}`)];
}

/** The last line `npm test` prints: the counts, and when the exit status is not 0, why. */
export function closingLine(summary: RunSummary | undefined, status: number): string {
  if (!summary) {
    const signal = status > 128 ? Object.entries(constants.signals).find(([, n]) => n === status - 128)?.[0] : undefined;
    return signal
      ? `exit status ${status}: stopped by ${signal}${signal === "SIGINT" ? " (Ctrl-C)" : ""} before vitest wrote its summary`
      : `exit status ${status}: vitest wrote no summary (it ended before its reporters did; see its output above)`;
  }
  const counts =
    `${summary.passed} passed, ${summary.failed} failed, ${summary.skipped.length} skipped` +
    (summary.notRun.length ? `, ${summary.notRun.length} not run (their file failed before them)` : "");
  if (status === 0) return counts;
  const listed = summary.failures?.length ? ", listed above" : "";
  const causes = [...(summary.failed ? [`${summary.failed} failed test(s)${listed}`] : []), ...otherCauses(summary)];
  return `${counts}; exit status ${status}: ${causes.length ? causes.join("; ") : "no failed test and no error reported: see vitest's output above"}`;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * Where the time went: each project's files' durations added up (files of a project run two at a
 * time, and projects side by side), and the slowest files.
 */
export function timeReport(summary: RunSummary, slowest = 10): string[] {
  const files = summary.files ?? [];
  if (files.length === 0) return [];
  const byProject = new Map<string, { ms: number; count: number }>();
  for (const f of files) {
    const entry = byProject.get(f.project) ?? { ms: 0, count: 0 };
    entry.ms += f.ms;
    entry.count++;
    byProject.set(f.project, entry);
  }
  return [
    "time by project (its files' durations added up):",
    ...[...byProject].sort((a, b) => b[1].ms - a[1].ms).map(([project, t]) => `  ${project}: ${seconds(t.ms)} in ${t.count} file(s)`),
    `the ${Math.min(slowest, files.length)} slowest files:`,
    ...[...files]
      .sort((a, b) => b.ms - a.ms)
      .slice(0, slowest)
      .map((f) => `  ${seconds(f.ms)}  ${f.file} (${f.project})`),
  ];
}

/**
 * The test files that cost the most CPU, from TEST_CPU_LOG's lines (test/support/file-cpu.ts): a
 * file of two projects is one entry, its runs added up.
 */
export function cpuReport(lines: FileCpu[], root: string, costliest = 10): string[] {
  if (lines.length === 0) return [];
  const byFile = new Map<string, { own: number; children: number; runs: number }>();
  for (const l of lines) {
    const file = relative(root, l.file);
    const entry = byFile.get(file) ?? { own: 0, children: 0, runs: 0 };
    entry.own += l.ownMs;
    entry.children += l.childrenMs;
    entry.runs++;
    byFile.set(file, entry);
  }
  const total = lines.reduce((sum, l) => sum + l.ownMs + l.childrenMs, 0);
  return [
    `CPU of the test files: ${seconds(total)} (their workers' and the processes they started; the run's own servers not included)`,
    `the ${Math.min(costliest, byFile.size)} costliest files (in the worker + in child processes):`,
    ...[...byFile]
      .sort((a, b) => b[1].own + b[1].children - (a[1].own + a[1].children))
      .slice(0, costliest)
      .map(([file, c]) => `  ${seconds(c.own + c.children)} (${seconds(c.own)} + ${seconds(c.children)})  ${file}${c.runs > 1 ? ` (${c.runs} runs)` : ""}`),
  ];
}

function readCpuLog(file: string): FileCpu[] {
  try {
    return readFileSync(file, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line) as FileCpu);
  } catch {
    return [];
  }
}

/**
 * The reporter: prints the skipped tests with their reasons and the other causes at the end of
 * every run (npx vitest too), and writes the summary to RUN_SUMMARY_FILE when it is set.
 */
export default class RunSummaryReporter implements Reporter {
  private namePattern: RegExp | undefined;
  private root = process.cwd();

  onInit(vitest: Vitest): void {
    this.root = vitest.config.root;
    const pattern = vitest.config.testNamePattern;
    this.namePattern = pattern ? new RegExp(pattern) : undefined;
  }

  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError>, reason: TestRunEndReason): void {
    const summary = summarize(testModules, unhandledErrors, reason, this.namePattern);
    if (summary.filteredOut) console.log(`\n${summary.filteredOut} left out by the name filter (-t)`);
    if (summary.skipped.length) {
      console.log(`\n${summary.skipped.length} skipped:`);
      for (const s of summary.skipped) console.log(`  - ${s.file} (${s.project}) > ${s.name}: ${s.reason}`);
    }
    if (testModules.length > 1) console.log(`\n${timeReport(summary).join("\n")}`);
    if (process.env.TEST_CPU_LOG) console.log(`\n${cpuReport(readCpuLog(process.env.TEST_CPU_LOG), this.root).join("\n")}`);
    const causes = otherCauses(summary);
    if (causes.length) {
      console.log("\nthe run fails besides its tests:");
      for (const cause of causes) console.log(`  - ${cause}`);
    }
    if (process.env.RUN_SUMMARY_FILE) writeFileSync(process.env.RUN_SUMMARY_FILE, JSON.stringify(summary));
  }
}

export function readSummary(file: string): RunSummary | undefined {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as RunSummary;
  } catch {
    return undefined;
  }
}
