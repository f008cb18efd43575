import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { binaries, launchAs } from "../../services/runtime/data/embedded-postgres.js";
import { freePort, whenParentExits } from "./nats-server.js";

/**
 * A private Postgres server on a free loopback port, for fault tests that stop and restart the
 * database without disturbing the shared server other tests use, on the binaries of the embedded
 * mode. As root it runs as the embedded mode's server does (Postgres refuses to run as root).
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

/**
 * As root, the server is launched as the embedded mode launches its own (`launchAs`): in a user
 * namespace where root's files appear as its own, so a clone in a folder only root can enter
 * (mode 0700, as `mktemp -d` makes it, or /root) works; where namespaces are refused, as the
 * `postgres` system user, which must be able to enter the folders.
 */
function asPostgresUser(command: string, args: string[]): [string, string[]] {
  if (process.getuid?.() !== 0) return [command, args];
  const { prefix, owner } = launchAs();
  if (owner) return ["runuser", ["-u", "postgres", "--", command, ...args]];
  return [prefix[0]!, [...prefix.slice(1), command, ...args]];
}

/**
 * `settings`: extra server settings (`-c name=value`), e.g. `shared_preload_libraries`. `bin`:
 * another folder of Postgres binaries; `parent`: the folder the server's folder is made in.
 */
export async function startPrivatePostgres(options: { settings?: Record<string, string>; bin?: string; parent?: string } = {}): Promise<PrivatePostgres> {
  const bin = options.bin ?? binDir();
  const dir = mkdtempSync(join(options.parent ?? tmpdir(), "wr-pg-"));
  chmodSync(dir, 0o777);
  const dataDir = join(dir, "data");
  let port = await freePort();
  const [initCmd, initArgs] = asPostgresUser(join(bin, "initdb"), ["-D", dataDir, "-A", "trust", "-U", "postgres", "--no-sync"]);
  execFileSync(initCmd, initArgs, { stdio: "ignore" });
  let child: ChildProcess | undefined;
  let watcher: ChildProcess | undefined;
  let url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let started = false;

  const start = async () => {
    for (let attempt = 0; !(await startOnce()); attempt++) {
      // Another program took the port between the probe and the bind: try another. On a restart
      // (start after stop) the port stays: tests reconnect to the same URL.
      if (started || attempt >= 2) throw new Error(`the private Postgres exited at start (port ${port})`);
      port = await freePort();
      url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    }
    started = true;
  };

  /** Starts the server: true once it answers, false if it exited first. */
  const startOnce = async (): Promise<boolean> => {
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
    const server = spawn(cmd, args, { stdio: "ignore" });
    child = server;
    // An immediate shutdown of the postmaster (its pid from its own file) if this worker dies.
    watcher?.kill("SIGKILL");
    watcher = whenParentExits('pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) && kill -QUIT "$pid" 2>/dev/null', [dataDir]);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const sql = postgres(url, { max: 1, connect_timeout: 1, onnotice: () => {} });
      // This server's answer, not another's that took the port before it bound it.
      const ok = await sql`select current_setting('data_directory') as dir`.then(
        ([row]) => row!.dir === dataDir,
        () => false,
      );
      await sql.end({ timeout: 1 });
      if (ok) return true;
      if (server.exitCode !== null || server.signalCode !== null) return false;
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
