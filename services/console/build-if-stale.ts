import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// Builds the web console (npm run build:console) when its output is missing or older than any
// of its sources. `npm install` runs it (postinstall), so `npm start` on a fresh clone serves at
// once; `npm start` runs it again (prestart), which costs nothing when nothing changed; the
// browser tests run it before they start.

const repository = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const sources = join(repository, "services/console/web");
const output = join(repository, "dist/console/index.html");

function newestMtime(path: string): number {
  const info = statSync(path);
  if (!info.isDirectory()) return info.mtimeMs;
  let newest = info.mtimeMs;
  for (const entry of readdirSync(path)) {
    if (entry === "node_modules") continue;
    newest = Math.max(newest, newestMtime(join(path, entry)));
  }
  return newest;
}

/**
 * Whether `dist/console` is missing or older than a console source or the lock file, so `npm run
 * build:console` must run.
 */
export function consoleIsStale(): boolean {
  let built: number;
  try {
    built = statSync(output).mtimeMs;
  } catch {
    return true;
  }
  const inputs = [sources, join(repository, "package-lock.json")];
  return inputs.some((path) => newestMtime(path) > built);
}

/** Builds the console when it is stale; throws when the build fails. */
export function ensureConsoleBuilt(options: { quiet?: boolean } = {}): boolean {
  if (!consoleIsStale()) return false;
  const result = spawnSync("npm", ["run", "-s", "build:console"], {
    cwd: repository,
    stdio: options.quiet ? "pipe" : "inherit",
    encoding: "utf8",
    timeout: 180_000,
  });
  if (result.status !== 0) {
    const detail = options.quiet ? `\n${result.stdout ?? ""}${result.stderr ?? ""}` : "";
    throw new Error(`npm run build:console failed (exit ${result.status ?? result.signal})${detail}`);
  }
  return true;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    if (ensureConsoleBuilt()) console.log("web console built into dist/console");
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  }
}
