import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LOCK_FILE_NAME } from "../../services/runtime/data/data-dir-lock.js";

/**
 * Set by the global setup: a folder of the run's in which the first worker that starts an app on
 * the embedded database makes a DATA_DIR once (Postgres created, migrated, the owner bootstrapped,
 * stopped), which every later such app starts from a copy of, as from a restored backup. Creating
 * and migrating one took about 2 s of CPU per app on two busy cores; a copy, milliseconds. The first
 * start itself is tested where it is the subject (test/runtime/embedded-mode.test.ts, the soak).
 */
export const EMBEDDED_TEMPLATE_ENV = "WARROOM_TEST_EMBEDDED_TEMPLATE";

/**
 * Variables that change what a first start writes in DATA_DIR (the bootstrap, the key file, the
 * database, the owner's password hash, the migrations): an app given any of them creates its own.
 */
const FIRST_START_VARIABLES = /^(BOOTSTRAP_|SECRETS_|DATABASE_|DATA_|PASSWORD_|MIGRATE_)/;

/** How long a worker waits for another to make the template before it creates its own DATA_DIR. */
const WAIT_MS = 180_000;

export function templateApplies(env: Record<string, string> = {}): boolean {
  return Boolean(process.env[EMBEDDED_TEMPLATE_ENV]) && !Object.keys(env).some((name) => FIRST_START_VARIABLES.test(name));
}

/**
 * Copies the run's template to `dir` (which must not exist, in a folder that does), making the
 * template first with `create` (an app started on the folder it is given, then stopped) when no
 * worker has. Without a template (its making failed, or took too long) nothing is copied: the
 * caller's app then creates its DATA_DIR itself.
 */
export async function copyTemplate(dir: string, create: (dir: string) => Promise<void>): Promise<void> {
  const root = process.env[EMBEDDED_TEMPLATE_ENV];
  if (!root) return;
  const template = join(root, "data");
  const ready = join(root, "ready");
  const failed = join(root, "failed");
  let mine = false;
  try {
    mkdirSync(join(root, "lock"), { recursive: false });
    mine = true;
  } catch {}
  if (mine) {
    const partial = join(root, "partial");
    try {
      await create(partial);
      // A clean stop leaves neither lock: a copy with one would be refused as a folder in use.
      for (const lock of [join(partial, LOCK_FILE_NAME), join(partial, "pg", "postmaster.pid")])
        if (existsSync(lock)) throw new Error(`the template's app left ${lock}`);
      renameSync(partial, template);
      writeFileSync(ready, "");
    } catch (err) {
      writeFileSync(failed, String(err));
      rmSync(partial, { recursive: true, force: true });
      throw err;
    }
  } else {
    const deadline = Date.now() + WAIT_MS;
    while (!existsSync(ready)) {
      if (existsSync(failed) || Date.now() > deadline) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  execFileSync("cp", ["-a", template, dir]);
}
