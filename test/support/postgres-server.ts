import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { binaries } from "../../services/runtime/embedded-postgres.js";
import { freePort, whenParentExits } from "./nats-server.js";

/**
 * A private Postgres server on a free loopback port, for fault tests that stop and restart the
 * database without disturbing the shared server other tests use, on the binaries of the embedded
 * mode. Runs as the `postgres` user when the tests run as root (Postgres refuses to run as root).
 */
export interface PrivatePostgres {
  url: string;
  stop(mode?: "fast" | "immediate"): Promise<void>;
  start(): Promise<void>;
  cleanup(): Promise<void>;
}

/** The Postgres 18 binaries the embedded mode runs: no system install needed. */
function binDir(): string {
  return binaries().bin;
}

function asPostgresUser(command: string, args: string[]): [string, string[]] {
  if (process.getuid?.() !== 0) return [command, args];
  ensurePostgresUser();
  return ["runuser", ["-u", "postgres", "--", command, ...args]];
}

/**
 * As root the server runs as the `postgres` user, which only a Postgres package creates: on a
 * machine without one (npm test installs none), create it as the embedded mode does.
 */
function ensurePostgresUser(): void {
  try {
    execFileSync("id", ["-u", "postgres"], { stdio: "ignore" });
  } catch {
    try {
      execFileSync("useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"], { stdio: "ignore" });
    } catch {
      // Another test worker created it meanwhile (else this throws: nobody could).
      execFileSync("id", ["-u", "postgres"], { stdio: "ignore" });
    }
  }
}

/**
 * `settings`: extra server settings (`-c name=value`), e.g. `shared_preload_libraries`. `bin`: the
 * folder of another Postgres build's initdb, postgres and pg_ctl (a system install's major version).
 */
export async function startPrivatePostgres(options: { settings?: Record<string, string>; bin?: string } = {}): Promise<PrivatePostgres> {
  const bin = options.bin ?? binDir();
  const dir = mkdtempSync(join(tmpdir(), "wr-pg-"));
  chmodSync(dir, 0o777);
  const dataDir = join(dir, "data");
  const port = await freePort();
  const [initCmd, initArgs] = asPostgresUser(join(bin, "initdb"), ["-D", dataDir, "-A", "trust", "-U", "postgres", "--no-sync"]);
  execFileSync(initCmd, initArgs, { stdio: "ignore" });
  let child: ChildProcess | undefined;
  let watcher: ChildProcess | undefined;
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;

  const start = async () => {
    const [cmd, args] = asPostgresUser(join(bin, "postgres"), [
      "-D",
      dataDir,
      "-p",
      String(port),
      "-h",
      "127.0.0.1",
      "-k",
      dir,
      // fsync off is safe here: the tests stop the server, never the machine. Commits stay
      // synchronous, so an acknowledged commit survives an immediate stop.
      "-c",
      "fsync=off",
      "-c",
      "max_connections=200",
      ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ["-c", `${name}=${value}`]),
    ]);
    child = spawn(cmd, args, { stdio: "ignore" });
    // An immediate shutdown of the postmaster (its pid from its own file) if this worker dies.
    watcher?.kill("SIGKILL");
    watcher = whenParentExits('pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) && kill -QUIT "$pid" 2>/dev/null', [dataDir]);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const sql = postgres(url, { max: 1, connect_timeout: 1, onnotice: () => {} });
      const ok = await sql`select 1`.then(
        () => true,
        () => false,
      );
      await sql.end({ timeout: 1 });
      if (ok) return;
      if (Date.now() > deadline) throw new Error("the private Postgres did not start");
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  const stop = async (mode: "fast" | "immediate" = "fast") => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child!.once("exit", resolve));
    // "immediate" stops the server as a crash would: no checkpoint, clients cut off.
    const [cmd, args] = asPostgresUser(join(bin, "pg_ctl"), ["-D", dataDir, "stop", "-m", mode, "-w"]);
    execFileSync(cmd, args, { stdio: "ignore" });
    await exited;
  };

  await start();
  return {
    url,
    start,
    stop,
    async cleanup() {
      await stop("immediate");
      watcher?.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
