/**
 * The closing step of `npm test` (scripts/test.sh): `tsx scripts/test-closing.ts <summary file>
 * <vitest's exit status>`. Prints the failed tests, each with its file and the first line of its
 * error, then the closing line (counts, and why the status is not 0), and exits
 * with the run's status; under CI=true a skipped test fails the run too: CI installs every
 * dependency a test could be skipped for.
 */
import { closingLine, failureList, readSummary } from "../test/support/run-summary.js";

const [file, statusText] = process.argv.slice(2);
const status = Number(statusText ?? 1);
const summary = readSummary(file ?? "");
console.log(`\n${[...failureList(summary), closingLine(summary, status)].join("\n")}`);
if (status === 0 && process.env.CI === "true" && summary?.skipped.length) {
  console.log(`CI: ${summary.skipped.length} test(s) skipped, listed above; CI has every dependency installed, so none may be`);
  process.exit(1);
}
process.exit(status);
