import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { RunSummary } from "../support/run-summary.js";
import { readSummary } from "../support/run-summary.js";

const ROOT = resolve(import.meta.dirname, "../..");
const dir = mkdtempSync(join(tmpdir(), "wr-run-summary-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The environment of a nested run: this worker's, without the variables vitest sets for itself. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("VITEST") && k !== "TEST" && k !== "NODE_ENV") env[k] = v;
  return { ...env, ...extra };
}

/** Runs vitest on one fixture file with the suite's reporters, then npm test's closing step. */
function run(
  fixture: string,
  ci = false,
  vitestArgs: string[] = [],
): { status: number; output: string; summary: RunSummary | undefined; closing: string; closingStatus: number } {
  const file = join(dir, `${fixture}.json`);
  const vitest = spawnSync(
    process.execPath,
    [join(ROOT, "node_modules/vitest/vitest.mjs"), "run", "--config", "test/harness/fixtures/vitest.config.ts", ...vitestArgs],
    {
      cwd: ROOT,
      env: cleanEnv({ FIXTURE: `${fixture}.fixture.ts`, RUN_SUMMARY_FILE: file }),
      encoding: "utf8",
    },
  );
  const closing = spawnSync(process.execPath, ["--import", "tsx", "scripts/test-closing.ts", file, String(vitest.status)], {
    cwd: ROOT,
    env: cleanEnv({ CI: ci ? "true" : "" }),
    encoding: "utf8",
  });
  return {
    status: vitest.status ?? -1,
    output: vitest.stdout + vitest.stderr,
    summary: readSummary(file),
    closing: closing.stdout.trim(),
    closingStatus: closing.status ?? -1,
  };
}

describe("the closing of a test run", () => {
  it("lists every skipped test with its reason; CI fails a run with a skipped test", () => {
    const local = run("skips");
    expect(local.status).toBe(0);
    expect(local.summary?.skipped).toEqual([
      { project: "", file: "skips.fixture.ts", name: "needs a tool this machine lacks", reason: "no frobnicator on this machine" },
      { project: "", file: "skips.fixture.ts", name: "skipped without a word", reason: "no reason given (skip)" },
    ]);
    expect(local.output).toContain("skips.fixture.ts () > needs a tool this machine lacks: no frobnicator on this machine");
    expect(local.closing).toBe("1 passed, 0 failed, 2 skipped");
    expect(local.closingStatus).toBe(0);

    const ci = run("skips", true);
    expect(ci.closing).toContain("CI: 2 test(s) skipped");
    expect(ci.closingStatus).toBe(1);
  }, 120_000);

  it("counts the tests a name filter (-t) left out apart from the skipped ones, and still lists a skip the filter kept", () => {
    const filtered = run("skips", false, ["-t", "without a word|^runs$"]);
    expect(filtered.status).toBe(0);
    expect(filtered.summary?.filteredOut).toBe(1);
    expect(filtered.summary?.skipped).toEqual([{ project: "", file: "skips.fixture.ts", name: "skipped without a word", reason: "no reason given (skip)" }]);
    expect(filtered.output).toContain("1 left out by the name filter (-t)");
  }, 120_000);

  it("a run that exits non-zero with 0 failed says why: an error after a test ended", () => {
    const r = run("late-rejection");
    expect(r.status).toBe(1);
    expect(r.summary).toMatchObject({ passed: 2, failed: 0 });
    expect(r.closing).toMatch(/^2 passed, 0 failed, 0 skipped; exit status 1: 1 error\(s\) outside any test: Error: late failure of an unawaited call/);
    expect(r.closingStatus).toBe(1);
  }, 120_000);

  it("a run that exits non-zero with 0 failed says why: a hook that failed outside the tests", () => {
    const r = run("after-all");
    expect(r.status).toBe(1);
    expect(r.closing).toMatch(/^1 passed, 0 failed, 0 skipped; exit status 1: after-all\.fixture\.ts \(\) failed outside its tests: .*cleanup failed/);
    expect(r.closingStatus).toBe(1);
  }, 120_000);

  it("a run whose beforeAll failed: its tests are 'not run', not skipped, and the closing line names the file and the error", () => {
    const r = run("before-all", true);
    expect(r.status).toBe(1);
    expect(r.summary).toMatchObject({ passed: 0, failed: 0, skipped: [], notRun: [{ name: "one" }, { name: "two" }] });
    expect(r.closing).toBe(
      "0 passed, 0 failed, 0 skipped, 2 not run (their file failed before them); exit status 1: " +
        "before-all.fixture.ts () failed outside its tests (2 of them never ran): Error: the app did not start",
    );
    expect(r.closingStatus).toBe(1);
  }, 120_000);

  it("the closing lines name every failed test with its file and the first line of its error, after everything else printed", () => {
    const r = run("failures");
    expect(r.status).toBe(1);
    expect(r.summary).toMatchObject({ passed: 1, failed: 2 });
    expect(r.summary?.failures).toEqual([
      {
        project: "",
        file: "failures.fixture.ts",
        name: "a suite > fails on a value",
        error: expect.stringMatching(/^AssertionError: expected .* to deeply equal/),
      },
      { project: "", file: "failures.fixture.ts", name: "fails with a thrown error", error: "Error: the service answered 503" },
    ]);
    const lines = r.closing.split("\n");
    expect(lines.at(-1)).toBe("1 passed, 2 failed, 0 skipped; exit status 1: 2 failed test(s), listed above");
    expect(lines.slice(0, -1)).toEqual([
      "failed:",
      expect.stringMatching(/^ {2}- failures\.fixture\.ts \(\) > a suite > fails on a value: AssertionError: expected/),
      "  - failures.fixture.ts () > fails with a thrown error: Error: the service answered 503",
    ]);
    expect(r.closingStatus).toBe(1);
  }, 120_000);

  it("a run that wrote no summary says so instead of printing counts", () => {
    const closing = spawnSync(process.execPath, ["--import", "tsx", "scripts/test-closing.ts", join(dir, "missing.json"), "1"], {
      cwd: ROOT,
      encoding: "utf8",
    });
    expect(closing.stdout.trim()).toMatch(/^exit status 1: vitest wrote no summary/);
    expect(closing.status).toBe(1);
    const interrupted = spawnSync(process.execPath, ["--import", "tsx", "scripts/test-closing.ts", join(dir, "missing.json"), "130"], {
      cwd: ROOT,
      encoding: "utf8",
    });
    expect(interrupted.stdout.trim()).toBe("exit status 130: stopped by SIGINT (Ctrl-C) before vitest wrote its summary");
    expect(interrupted.status).toBe(130);
  });
});
