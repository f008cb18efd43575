import { execFile, execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

/**
 * The previous release's source tree, ready to run with this tree's tsx: read from RELEASES.json (a clone may
 * not carry tags), extracted from git history with `git archive`, and given its dependencies.
 */

export const ROOT = resolve(import.meta.dirname, "../..");

export interface Release {
  version: string;
  commit: string;
  date: string;
}

/** RELEASES.json: every released version, oldest first. */
export function releases(root = ROOT): Release[] {
  const list = JSON.parse(readFileSync(join(root, "RELEASES.json"), "utf8")) as Release[];
  if (!Array.isArray(list) || list.length === 0) throw new Error("RELEASES.json lists no release");
  for (const release of list) {
    if (!/^\d+\.\d+\.\d+$/.test(release.version) || !/^[0-9a-f]{40}$/.test(release.commit))
      throw new Error(`RELEASES.json: ${JSON.stringify(release)} needs a version like 1.2.3 and a full 40-character commit hash`);
  }
  return list;
}

/** The release the current code must work alongside: the newest one listed. */
export function previousRelease(root = ROOT): Release {
  return releases(root).at(-1)!;
}

/** Throws, saying how to get it, when the commit is not in the clone at `root` (a shallow CI checkout). */
export function assertCommitPresent(release: Release, root = ROOT): void {
  const present = spawnSync("git", ["cat-file", "-e", `${release.commit}^{commit}`], { cwd: root, stdio: "ignore" }).status === 0;
  if (present) return;
  const shallow = execFileSync("git", ["rev-parse", "--is-shallow-repository"], { cwd: root, encoding: "utf8" }).trim() === "true";
  throw new Error(
    `release ${release.version} (commit ${release.commit}) is not in this clone${shallow ? ", a shallow one" : ""}: ` +
      "the upgrade test runs that release's code. Fetch the history (`git fetch --unshallow`, or `fetch-depth: 0` in CI) and run the test again.",
  );
}

export interface ReleaseTree {
  release: Release;
  dir: string;
  /** How its dependencies were provided: the current node_modules (same lock) or a cached `npm ci`. */
  dependencies: "shared" | "installed" | "cached";
  /** Milliseconds spent extracting and installing (0 when both were cached). */
  preparedMs: number;
}

/**
 * The release's tree in the OS temp folder, keyed by commit (extracted once, then reused). With the
 * same package-lock.json and patches as the current tree it shares the current node_modules;
 * otherwise its `npm ci` goes to a folder keyed by their hash, patched, and is reused by later runs.
 */
export async function prepareReleaseTree(release: Release): Promise<ReleaseTree> {
  assertCommitPresent(release);
  const started = Date.now();
  const dir = join(tmpdir(), `warroom-release-${release.version}-${release.commit.slice(0, 12)}`);
  if (!existsSync(join(dir, "package.json"))) {
    const partial = `${dir}.partial-${process.pid}`;
    rmSync(partial, { recursive: true, force: true });
    mkdirSync(partial, { recursive: true });
    const archive = spawnSync("git", ["archive", "--format=tar", release.commit], { cwd: ROOT, maxBuffer: 1 << 30 });
    if (archive.status !== 0) throw new Error(`git archive ${release.commit} failed: ${archive.stderr.toString()}`);
    const untar = spawnSync("tar", ["-x", "-C", partial], { input: archive.stdout });
    if (untar.status !== 0) throw new Error(`extracting release ${release.version} failed: ${untar.stderr.toString()}`);
    // Another run may have finished first: its tree is as good as this one.
    try {
      renameSync(partial, dir);
    } catch {
      rmSync(partial, { recursive: true, force: true });
    }
  }
  const key = dependencyKey(dir);
  let dependencies: ReleaseTree["dependencies"] = "shared";
  const modules = join(dir, "node_modules");
  if (key !== dependencyKey(ROOT)) dependencies = await installDependencies(dir, key);
  linkTo(modules, dependencies === "shared" ? join(ROOT, "node_modules") : join(tmpdir(), `warroom-deps-${key}`, "node_modules"));
  return { release, dir, dependencies, preparedMs: Date.now() - started };
}

/** Points the link at `target`, replacing one left pointing elsewhere (another checkout's, since removed). */
function linkTo(link: string, target: string): void {
  let current: string | undefined;
  try {
    current = readlinkSync(link);
  } catch {}
  if (current === target) return;
  rmSync(link, { force: true });
  symlinkSync(target, link, "dir");
}

/**
 * What a tree's node_modules is made of: its lock and the patches applied to it. The project's own
 * version in the lock is left out: a release bumps it without changing any dependency.
 */
function dependencyKey(tree: string): string {
  const lock = JSON.parse(readFileSync(join(tree, "package-lock.json"), "utf8"));
  delete lock.version;
  if (lock.packages?.[""]) delete lock.packages[""].version;
  const hash = createHash("sha256").update(JSON.stringify(lock));
  const patches = join(tree, "patches");
  if (existsSync(patches)) for (const name of readdirSync(patches).sort()) hash.update(name).update(readFileSync(join(patches, name)));
  return hash.digest("hex").slice(0, 16);
}

async function installDependencies(tree: string, key: string): Promise<"installed" | "cached"> {
  const deps = join(tmpdir(), `warroom-deps-${key}`);
  if (existsSync(join(deps, "node_modules", ".package-lock.json"))) return "cached";
  const partial = `${deps}.partial-${process.pid}`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  for (const file of ["package.json", "package-lock.json"]) cpSync(join(tree, file), join(partial, file));
  if (existsSync(join(tree, "patches"))) cpSync(join(tree, "patches"), join(partial, "patches"), { recursive: true });
  // Its production dependencies only: it runs through this tree's tsx (test/support/compiled-services.ts),
  // and its build and test tools are not needed to run it (a full install took 35 s of CPU and
  // 56 s on two cores, this one 20 s and 16 s). No install scripts (a release's dependencies run
  // none of theirs here); the step of its postinstall that running it needs is run explicitly,
  // with this tree's patch-package: the patched packages. Asynchronous: an install takes seconds
  // to minutes, and the test worker must keep answering meanwhile.
  await run("npm", ["ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"], partial);
  await run(join(ROOT, "node_modules", ".bin", "patch-package"), [], partial);
  try {
    renameSync(partial, deps);
  } catch {
    rmSync(partial, { recursive: true, force: true });
  }
  return "installed";
}

function run(command: string, args: string[], cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, timeout: 900_000, maxBuffer: 64 << 20 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${command} ${args.join(" ")} failed in ${cwd}: ${err.message}\n${stdout}\n${stderr}`)) : resolve(),
    );
  });
}
