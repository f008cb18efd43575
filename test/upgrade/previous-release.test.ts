import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { assertCommitPresent, previousRelease, releases, ROOT } from "./previous-release.js";

/** RELEASES.json names the previous release, and a clone without its commit fails the upgrade test. */

const cleanups: Array<() => void> = [];
afterAll(() => {
  for (const cleanup of cleanups) cleanup();
});

describe("the previous release", () => {
  it("RELEASES.json lists versions in ascending order, each with a full commit hash this clone holds", () => {
    const list = releases();
    const order = list.map((r) => r.version.split(".").map(Number));
    for (let i = 1; i < order.length; i++) {
      const [a, b] = [order[i - 1]!, order[i]!];
      expect(a[0]! * 1e6 + a[1]! * 1e3 + a[2]!, `${list[i]!.version} after ${list[i - 1]!.version}`).toBeLessThan(b[0]! * 1e6 + b[1]! * 1e3 + b[2]!);
    }
    for (const release of list) expect(() => assertCommitPresent(release)).not.toThrow();
  });

  it("in a shallow clone, is missing: the check fails saying to fetch the history, never skips", () => {
    const dir = mkdtempSync(join(tmpdir(), "wr-shallow-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    execFileSync("git", ["clone", "--quiet", "--depth", "1", "--no-checkout", `file://${ROOT}`, dir], { stdio: "pipe" });
    const release = previousRelease();
    expect(() => assertCommitPresent(release, dir)).toThrow(
      `release ${release.version} (commit ${release.commit}) is not in this clone, a shallow one: the upgrade test runs that release's code. Fetch the history (\`git fetch --unshallow\`, or \`fetch-depth: 0\` in CI) and run the test again.`,
    );
  });
});
