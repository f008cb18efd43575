import { defineConfig } from "vitest/config";
import { LongestFirstSequencer } from "./test/support/longest-first.js";

/**
 * The end-to-end suites that run twice: against the Postgres server, and in the default mode with
 * the embedded Postgres (TEST_DATABASE=embedded), so both modes are tested alike.
 */
export const E2E_SUITES = [
  "test/e2e/triggers-shared-endpoint.test.ts",
  "test/e2e/receivers-alert-router-and-chat.test.ts",
  "test/e2e/receivers-shared-limit.test.ts",
  "test/security/slow-bodies.test.ts",
  "test/e2e/identity.test.ts",
  // A removal racing writes that grant access, held open on a connection of the test's own.
  "test/security/credential-races.test.ts",
  "test/security/stolen-api-key.test.ts",
  "test/e2e/custom-sources.test.ts",
  "test/e2e/retention.test.ts",
  "test/e2e/custom-source-shares.test.ts",
  "test/e2e/large-previews-and-overrides.test.ts",
  "test/e2e/retry-answers.test.ts",
  "services/heartbeats/heartbeats.test.ts",
  "services/heartbeats/silence.test.ts",
  "services/comms/comms.test.ts",
  "services/comms/review.test.ts",
  "services/incidents/maintenance-windows/maintenance-windows.test.ts",
  "services/incidents/respond.test.ts",
  "services/remotesource/remote-sources.test.ts",
  "services/remotesource/investigations.test.ts",
  "services/remotesource/investigation-runs.test.ts",
  "services/subscriptions/subscriptions.test.ts",
  // The public port's connection handling: client addresses over HTTP/2, the cap's answers, slow readers.
  "test/security/connection-robustness.test.ts",
  // The transaction rule, checked with a pool of one connection: the freeze the default mode had.
  "test/runtime/pool-of-one.test.ts",
  // The counters the alert rules use are at 0 from the first scrape.
  "test/runtime/metrics-initialised.test.ts",
];

/** Test files running at once (TEST_WORKERS), whichever project they belong to. */
const WORKERS = Number(process.env.TEST_WORKERS ?? 4);

/** Tests that need no Postgres, no NATS and no service: named `*.unit.test.ts`. */
const UNIT_TESTS = ["services/**/*.unit.test.ts", "test/**/*.unit.test.ts", "scripts/**/*.unit.test.ts"];

export default defineConfig({
  test: {
    exclude: ["node_modules", "dist", "test/bench/**"],
    // A private Postgres and NATS for the run, unless DATABASE_URL / NATS_URL name others (none
    // for a run of the unit project alone: see the setup).
    globalSetup: ["test/support/global-setup.ts"],
    // TEST_CPU_LOG=<file>: each test file's CPU, its child processes' included, logged there and
    // the costliest printed at the end (test/support/file-cpu.ts).
    setupFiles: process.env.TEST_CPU_LOG ? ["test/support/file-cpu.ts"] : [],
    // Lists every skipped test with its reason, and why a run fails besides its failed tests.
    reporters: ["default", "./test/support/run-summary.ts"],
    // Bounds that detect a hang, not a budget: a test that takes a few seconds on a quiet machine
    // can take ten times as long while other work loads every core (scripts/loaded-test-runs.sh).
    testTimeout: 120_000,
    hookTimeout: 180_000,
    // expect.poll waits for something that happens in milliseconds; its default second is a budget.
    expect: { poll: { timeout: 30_000 } },
    // Four files at a time on two cores: most of a file's time is spent waiting (on its processes,
    // its retries, its timers), so four keep both cores busy where two left a fifth of them idle (a
    // sample of 49 files: 313 s against 401 s). Each file has a fresh database and each cluster a
    // NATS server of its own. Every project runs in one group, so none waits for another to end:
    // vitest gives the projects of a group one worker count.
    maxWorkers: WORKERS,
    // Each project's longest files first (test/support/longest-first.ts), so none ends it alone.
    sequence: { sequencer: LongestFirstSequencer },
    pool: "forks",
    // A worker runs test file after test file in one process, importing the services once: with a
    // fresh process per file, the run spent more CPU evaluating the same modules (about 3 s a file,
    // 820 s in all) than on most tests. Test files share no state but the process's metrics
    // registry, which test/support/app.ts resets when a file starts the first app.
    isolate: false,
    // The tests' NATS servers (the shared one and test/support's private ones) ask for no
    // credentials: allowed here explicitly, as the services refuse such a server otherwise.
    // Child processes inherit it. test/security/nats-auth.test.ts unsets it to check the refusal.
    // With a Postgres server the services refuse to start without SECRETS_KEYS: every app and child
    // process of the run shares this test key (replicas sharing a database must).
    // Passwords are hashed at scrypt's lowest accepted cost (2^14), not the default 2^17: a hash
    // took about 0.6 s of CPU, and every app's owner, every login and every new member pays one
    // (people.test.ts: 96 s of CPU against 29 s). The login tests set the default back.
    env: {
      NATS_ALLOW_UNAUTHENTICATED: "true",
      SECRETS_KEYS: `test1:${Buffer.alloc(32, 1).toString("base64")}`,
      PASSWORD_SCRYPT_N: "16384",
    },
    projects: [
      {
        extends: true,
        test: {
          name: "server",
          sequence: { groupOrder: 0 },
          include: ["services/**/*.test.ts", "test/**/*.test.ts"],
          exclude: ["node_modules", "dist", "test/bench/**", "test/soak/**", ...UNIT_TESTS, "test/deploy/container.test.ts", "test/deploy/compose.test.ts"],
        },
      },
      {
        // Handlers over in-memory stores and stub peers, and the scripts' own logic: no database,
        // no NATS, seconds in all.
        extends: true,
        test: { name: "unit", sequence: { groupOrder: 0 }, include: UNIT_TESTS },
      },
      {
        extends: true,
        test: { name: "embedded", sequence: { groupOrder: 0 }, include: E2E_SUITES, env: { TEST_DATABASE: "embedded" } },
      },
      {
        // A minute of load in the default mode: run by the test command, or on its own with
        // `npx vitest run --project soak`. Beside the other projects: what it checks holds however
        // busy the machine is, and the latencies it prints decide nothing.
        extends: true,
        test: { name: "soak", sequence: { groupOrder: 0 }, include: ["test/soak/**/*.test.ts"], testTimeout: 300_000 },
      },
      {
        // The image built from the Dockerfile, run in containers (scripts/build-image.sh builds it,
        // scripts/docker-daemon.sh starts a daemon when none runs), alone and by deploy/compose:
        // beside the other projects, its two files one at a time (each may start and stop the
        // daemon: test/support/image-build.ts holds a lock across the run's workers), each once the
        // test command's background build of the images has ended.
        extends: true,
        test: {
          name: "container",
          sequence: { groupOrder: 0 },
          include: ["test/deploy/container.test.ts", "test/deploy/compose.test.ts"],
          testTimeout: 300_000,
        },
      },
    ],
  },
});
