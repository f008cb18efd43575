import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files of a project that took longest in a full run on the 2-core machine (seconds, from the
 * "slowest files" the run prints and its per-file lines), longest first. Started first, they no
 * longer end the project alone: on a fresh clone vitest has no timings of its own and starts the
 * largest files first, which left four files of 30 to 50 s running alone for the last minute of
 * the `server` project. A file missing here only starts later; refresh the list from a full run
 * when files grow or are added.
 */
export const LONGEST: Record<string, number> = {
  "server:test/security/login-stranger.test.ts": 96,
  "server:test/e2e/custom-sources.test.ts": 85,
  "server:test/faults/subscription-deliveries.test.ts": 66,
  "server:test/deploy/manifests.test.ts": 59,
  "server:test/runtime/probes-and-shutdown.test.ts": 55,
  "server:test/faults/cluster-faults.test.ts": 54,
  "server:test/e2e/receivers-alert-router-and-chat.test.ts": 49,
  "server:test/upgrade/rolling-upgrade.test.ts": 44,
  "server:test/faults/seam-faults.test.ts": 42,
  "server:test/e2e/large-body-budget.test.ts": 41,
  "server:test/e2e/role-matrix.test.ts": 41,
  "server:test/runtime/embedded-mode.test.ts": 40,
  "server:test/docs/readme-examples.test.ts": 40,
  "server:services/subscriptions/subscriptions.test.ts": 37,
  "server:test/e2e/triggers-shared-endpoint.test.ts": 35,
  "server:test/faults/incidents-replicas.test.ts": 34,
  "server:test/faults/durable-consumers.test.ts": 34,
  "server:test/e2e/retries.test.ts": 33,
  "server:services/heartbeats/replicas.test.ts": 33,
  "server:test/e2e/retry-answers.test.ts": 32,
  "server:test/faults/correlation-replicas.test.ts": 32,
  "server:test/faults/heartbeat-sweep-postgres-restart.test.ts": 31,
  "server:test/security/login.test.ts": 30,
  "server:test/e2e/dropin-receivers.test.ts": 29,
  "server:test/security/connection-flood.test.ts": 28,
  "embedded:test/e2e/retry-answers.test.ts": 32,
  "embedded:services/subscriptions/subscriptions.test.ts": 32,
  "embedded:test/e2e/custom-sources.test.ts": 26,
  "embedded:test/e2e/receivers-alert-router-and-chat.test.ts": 22,
};

/**
 * Vitest's order (group by group, project by project), with each project's known long files first,
 * longest first; the rest keep vitest's order after them.
 */
export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const ordered = await super.sort(files);
    const seconds = (spec: TestSpecification) => LONGEST[`${spec.project.name}:${relative(spec.project.config.root, spec.moduleId)}`] ?? 0;
    const position = new Map(ordered.map((spec, i) => [spec, i]));
    return [...ordered].sort((a, b) => {
      // Groups and projects stay where vitest put them; only files within a project move.
      if (a.project !== b.project) return position.get(a)! - position.get(b)!;
      return seconds(b) - seconds(a) || position.get(a)! - position.get(b)!;
    });
  }
}
