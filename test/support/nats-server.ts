import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { freePort } from "../../services/process/cluster.js";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A private nats-server with JetStream on a free loopback port, for tests that stop and start it. */
export { freePort };

export interface PrivateNats {
  url: string;
  port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Sends the server a signal: SIGSTOP makes it hang (connections open, nothing answered), SIGCONT resumes it. */
  signal(signal: NodeJS.Signals): void;
  /** The server's process id while it runs (a benchmark counts its CPU). */
  pid(): number | undefined;
  cleanup(): Promise<void>;
}

export const NATS_SERVER_BINARY = process.env.NATS_SERVER_BIN ?? "nats-server";

/** `config` is nats-server configuration text (e.g. an authorization block) the server starts with. */
export async function startPrivateNats(options: { config?: string } = {}): Promise<PrivateNats> {
  const port = await freePort();
  const storeDir = mkdtempSync(join(tmpdir(), "wr-nats-"));
  const configArgs: string[] = [];
  if (options.config) {
    const file = join(storeDir, "server.conf");
    writeFileSync(file, options.config);
    configArgs.push("-c", file);
  }
  let child: ChildProcess | undefined;
  const start = async () => {
    child = spawn(NATS_SERVER_BINARY, [...configArgs, "-a", "127.0.0.1", "-p", String(port), "-js", "-sd", storeDir], { stdio: "ignore" });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const ok = await new Promise<boolean>((resolve) => {
        const socket = net.connect(port, "127.0.0.1");
        socket.once("connect", () => {
          socket.destroy();
          resolve(true);
        });
        socket.once("error", () => resolve(false));
      });
      if (ok) return;
      if (Date.now() > deadline) throw new Error("nats-server did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const stop = async () => {
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child!.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    start,
    stop,
    signal: (signal) => void child?.kill(signal),
    pid: () => child?.pid,
    async cleanup() {
      child?.kill("SIGCONT");
      await stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
