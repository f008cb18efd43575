import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that took longest in a full run on the 2-core machine (seconds, from the run's
 * per-file lines; `project:file`), longest first. Started first, they no longer end the run
 * alone: on a fresh clone vitest has no timings of its own and starts the largest files first,
 * which left four files of 30 to 50 s running alone for the last minute of the `server` project. A file missing here only starts later; refresh the list from a full run
 * when files grow or are added.
 */
export const LONGEST: Record<string, number> = {
  "server:test/security/login-stranger.test.ts": 106,
  "server:test/e2e/custom-sources.test.ts": 99,
  "server:test/faults/subscription-deliveries.test.ts": 76,
  "server:test/runtime/probes-and-shutdown.test.ts": 75,
  "server:test/deploy/manifests.test.ts": 64,
  "server:test/upgrade/rolling-upgrade.test.ts": 64,
  "soak:test/soak/embedded-soak.test.ts": 64,
  "server:test/runtime/embedded-mode.test.ts": 63,
  "server:test/faults/cluster-faults.test.ts": 53,
  "server:test/security/login.test.ts": 48,
  "server:test/e2e/large-body-budget.test.ts": 45,
  "server:test/docs/readme-examples.test.ts": 39,
  "server:test/faults/seam-faults.test.ts": 38,
  "server:services/subscriptions/subscriptions.test.ts": 35,
  "server:test/faults/correlation-replicas.test.ts": 34,
  "server:test/e2e/retry-answers.test.ts": 34,
  "server:test/faults/durable-consumers.test.ts": 34,
  "server:test/e2e/retries.test.ts": 34,
  "embedded:services/subscriptions/subscriptions.test.ts": 33,
  "embedded:test/e2e/retry-answers.test.ts": 33,
  "server:test/runtime/backup.test.ts": 31,
  "server:services/heartbeats/replicas.test.ts": 30,
  "server:test/runtime/outbox.test.ts": 30,
  "server:test/harness/test-servers.test.ts": 29,
  "server:test/e2e/people.test.ts": 29,
  "server:test/e2e/role-matrix.test.ts": 27,
  "embedded:test/e2e/custom-sources.test.ts": 27,
  "server:test/e2e/large-previews-and-overrides.test.ts": 27,
  "server:test/browser/console.test.ts": 26,
  "server:test/e2e/custom-source-large-bodies.test.ts": 25,
  // The longest unit file: started last, it ended the run alone for 20 s.
  "unit:services/runtime/http/http-server.unit.test.ts": 22,
};

/**
 * Vitest's order (group by group), with the known long files of each group first, longest first,
 * whichever project they belong to: the projects of a group share its workers. The rest keep
 * vitest's order after them.
 */
export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const ordered = await super.sort(files);
    const seconds = (spec: TestSpecification) => LONGEST[`${spec.project.name}:${relative(spec.project.config.root, spec.moduleId)}`] ?? 0;
    const group = (spec: TestSpecification) => spec.project.config.sequence.groupOrder ?? 0;
    const position = new Map(ordered.map((spec, i) => [spec, i]));
    return [...ordered].sort((a, b) => group(a) - group(b) || seconds(b) - seconds(a) || position.get(a)! - position.get(b)!);
  }
}
