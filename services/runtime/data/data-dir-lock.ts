import { linkSync, openSync, readFileSync, renameSync, rmSync, unlinkSync, writeSync, closeSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";

/** The lock file in DATA_DIR: the PID of the process that owns the folder. */
export const LOCK_FILE_NAME = "warroom.lock";

export class DataDirLockedError extends Error {
  override name = "DataDirLockedError";
  constructor(
    readonly dir: string,
    readonly pid: number,
  ) {
    super(
      `DATA_DIR ${dir} is in use by process ${pid} (lock file ${join(dir, LOCK_FILE_NAME)}). ` +
        "Stop that process first, or give this one another DATA_DIR, or set DATABASE_URL to share a Postgres server.",
    );
  }
}

export interface DataDirLock {
  dir: string;
  release(): void;
}

/** Folders locked by this process: a second open in the same process is refused as well. */
const heldHere = new Set<string>();

/** Whether a process with this PID exists (EPERM: it exists, under another user). */
export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

function readPid(path: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(path, "utf8").trim(), 10);
    return Number.isInteger(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the PID to a private file, then links it into place: the lock appears whole or not at all. */
function tryCreate(lockPath: string): boolean {
  const temp = `${lockPath}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  const fd = openSync(temp, "wx", 0o644);
  try {
    writeSync(fd, `${process.pid}\n`);
  } finally {
    closeSync(fd);
  }
  try {
    linkSync(temp, lockPath);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  } finally {
    rmSync(temp, { force: true });
  }
}

/**
 * Locks DATA_DIR for this process, or throws DataDirLockedError naming the folder and the PID
 * that holds it. A lock left by a process that no longer runs (kill -9, a crash) is taken over.
 */
export function lockDataDir(dataDir: string): DataDirLock {
  const dir = resolve(dataDir);
  mkdirSync(dir, { recursive: true });
  const lockPath = join(dir, LOCK_FILE_NAME);
  if (heldHere.has(dir)) throw new DataDirLockedError(dir, process.pid);
  for (let attempt = 0; attempt < 5; attempt++) {
    if (tryCreate(lockPath)) {
      heldHere.add(dir);
      return {
        dir,
        release() {
          if (!heldHere.delete(dir)) return;
          if (readPid(lockPath) === process.pid) rmSync(lockPath, { force: true });
        },
      };
    }
    const holder = readPid(lockPath);
    if (holder !== undefined && holder !== process.pid && processAlive(holder)) throw new DataDirLockedError(dir, holder);
    // A lock with our own PID that this process does not hold was left by an earlier run with
    // the same PID: it is stale too.
    // Stale: move it aside under a unique name, so two processes taking over at once cannot both
    // remove a lock; the one whose rename finds a live owner's file puts it back and refuses.
    const aside = `${lockPath}.stale.${process.pid}.${Math.random().toString(36).slice(2)}`;
    try {
      renameSync(lockPath, aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw err;
    }
    const moved = readPid(aside);
    if (moved !== undefined && moved !== holder && processAlive(moved)) {
      try {
        linkSync(aside, lockPath);
      } catch {
        // Someone else holds it now; they keep it.
      }
      unlinkSync(aside);
      throw new DataDirLockedError(dir, moved);
    }
    unlinkSync(aside);
  }
  const holder = readPid(lockPath) ?? 0;
  throw new DataDirLockedError(dir, holder);
}
