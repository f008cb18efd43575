import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["services/**/*.test.ts", "test/**/*.test.ts"],
    exclude: ["node_modules", "dist", "test/bench/**"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: test files share one Postgres server and one NATS server.
    maxWorkers: 2,
    pool: "forks",
  },
});
