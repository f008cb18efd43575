import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, listensOn } from "../../services/process/cluster.js";

/** A private nats-server with JetStream on a free loopback port, for tests that stop and start it. */
export { freePort };

export interface PrivateNats {
  url: string;
  port: number;
  /** The folder of the JetStream store (and the configuration file), removed by cleanup. */
  storeDir: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Sends the server a signal: SIGSTOP makes it hang (connections open, nothing answered), SIGCONT resumes it. */
  signal(signal: NodeJS.Signals): void;
  /** The server's process id while it runs (a benchmark counts its CPU). */
  pid(): number | undefined;
  cleanup(): Promise<void>;
}

export const NATS_SERVER_BINARY = process.env.NATS_SERVER_BIN ?? "nats-server";

/**
 * Runs `script` (sh, with `args` as $1…) when this process ends in any way, kill -9 included: a
 * small shell holds the read end of a pipe from this process, and the pipe closes only when this
 * process is gone. Without it a test worker that crashed, or a test run stopped with kill, would
 * leave its private servers running. Kill the returned watcher when the server stops normally.
 */
export function whenParentExits(script: string, args: string[]): ChildProcess {
  const watcher = spawn("/bin/sh", ["-c", `read -r _; ${script}; exit 0`, "sh", ...args], { stdio: ["pipe", "ignore", "ignore"] });
  watcher.stdin!.on("error", () => {});
  // The pipe alone must not keep this process alive.
  watcher.unref();
  (watcher.stdin as unknown as { unref?: () => void }).unref?.();
  return watcher;
}

function killWhenParentExits(pid: number): ChildProcess {
  return whenParentExits('kill -0 "$1" 2>/dev/null && kill -KILL "$1" 2>/dev/null', [String(pid)]);
}

function portAnswers(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/**
 * `config` is nats-server configuration text (e.g. an authorization block) the server starts with;
 * `parentDir` the folder its store is made in (the system's temporary folder unless given).
 */
export async function startPrivateNats(options: { config?: string; parentDir?: string } = {}): Promise<PrivateNats> {
  let port = await freePort();
  const storeDir = mkdtempSync(join(options.parentDir ?? tmpdir(), "wr-nats-"));
  const configArgs: string[] = [];
  if (options.config) {
    const file = join(storeDir, "server.conf");
    writeFileSync(file, options.config);
    configArgs.push("-c", file);
  }
  let url: string | undefined;
  let child: ChildProcess | undefined;
  let watcher: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const start = async () => {
    for (let attempt = 0; ; attempt++) {
      const server = spawn(NATS_SERVER_BINARY, [...configArgs, "-a", "127.0.0.1", "-p", String(port), "-js", "-sd", storeDir], { stdio: "ignore" });
      child = server;
      exited = new Promise((resolve) => server.once("exit", () => resolve()));
      const spawnError = new Promise<Error>((resolve) => server.once("error", resolve));
      const pid = server.pid;
      if (pid === undefined) throw new Error(`cannot start ${NATS_SERVER_BINARY}: ${(await spawnError).message}`);
      watcher = killWhenParentExits(pid);
      // A hang detector, not a budget: nats-server answers within a second even on a busy machine.
      const deadline = Date.now() + 30_000;
      // The answer must be this server's: another program may have taken the port before it bound it.
      while (running() && !((await portAnswers(port)) && listensOn(pid, port) !== false)) {
        if (Date.now() > deadline) throw new Error("nats-server did not start");
        await new Promise((r) => setTimeout(r, 50));
      }
      if (running()) return;
      watcher.kill("SIGKILL");
      // Another program took the port between the probe and the bind: try another. On a restart
      // (start after stop) the port stays: tests reconnect to the same URL.
      if (attempt >= 2 || url !== undefined) throw new Error(`nats-server exited at start (port ${port})`);
      port = await freePort();
    }
  };
  const stop = async () => {
    if (!running()) return;
    watcher?.kill("SIGKILL");
    child!.kill("SIGKILL");
    await exited;
  };
  await start();
  url = `nats://127.0.0.1:${port}`;
  return {
    url,
    port,
    storeDir,
    start,
    stop,
    signal: (signal) => void child?.kill(signal),
    pid: () => (running() ? child?.pid : undefined),
    async cleanup() {
      child?.kill("SIGCONT");
      await stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
