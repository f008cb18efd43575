import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { COMPILED_ENV, compileServices } from "./compiled-services.js";
import { EMBEDDED_TEMPLATE_ENV } from "./embedded-template.js";
import { startTestServers } from "./test-servers.js";

/**
 * Vitest's global setup: starts the run's private Postgres and NATS (test/support/test-servers.ts)
 * before any worker, and exports DATABASE_URL and NATS_URL, which the workers inherit
 * (ADMIN_DATABASE_URL and NATS_URL in test/support/app.ts read them), and compiles the services
 * once for the processes tests start (test/support/compiled-services.ts), and names the folder of
 * the embedded database's template DATA_DIR (test/support/embedded-template.ts). Stops both servers at
 * the end, on failure and on Ctrl-C; a kill -9 of the run stops them too (they watch this process).
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Each project runs this; the unit tests need neither server (a run of them alone starts none).
  if (project.name === "unit") return async () => {};
  const servers = await startTestServers(process.env);
  process.env.DATABASE_URL = servers.databaseUrl;
  process.env.NATS_URL = servers.natsUrl;
  // One compiled tree for the whole run, made by the first project that needs servers.
  const compiled = process.env[COMPILED_ENV] ? undefined : await compileServices();
  if (compiled) process.env[COMPILED_ENV] = compiled.dir;
  const template = process.env[EMBEDDED_TEMPLATE_ENV] ? undefined : mkdtempSync(join(tmpdir(), "wr-embedded-template-"));
  if (template) {
    // Enterable by the user the embedded Postgres runs as under root, as tempDataDir's folders are.
    chmodSync(template, 0o755);
    process.env[EMBEDDED_TEMPLATE_ENV] = template;
  }
  // The servers stop by themselves when this process exits; the folder is removed here, for an
  // exit that skips the teardown (Ctrl-C, process.exit).
  const removeDir = () => {
    if (servers.dir) rmSync(servers.dir, { recursive: true, force: true });
    compiled?.remove();
    if (template) rmSync(template, { recursive: true, force: true });
  };
  process.once("exit", removeDir);
  return async () => {
    await servers.stop();
    compiled?.remove();
    if (template) rmSync(template, { recursive: true, force: true });
    process.off("exit", removeDir);
  };
}
