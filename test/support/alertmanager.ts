import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, listensOn } from "../../services/process/cluster.js";

/**
 * A real Prometheus Alertmanager (Debian's `prometheus-alertmanager`) on a free loopback port,
 * with the given configuration, clustering off. Alerts go in through its own `/api/v2/alerts`.
 */

export const ALERTMANAGER_BINARY = process.env.ALERTMANAGER_BIN ?? "prometheus-alertmanager";

export interface RunningAlertmanager {
  url: string;
  /** What it printed, for a failing test's message. */
  output: string[];
  postAlerts(alerts: PostableAlert[]): Promise<void>;
  stop(): Promise<void>;
}

export interface PostableAlert {
  labels: Record<string, string>;
  annotations?: Record<string, string>;
  startsAt?: string;
  endsAt?: string;
  generatorURL?: string;
}

export async function startAlertmanager(configYaml: string): Promise<RunningAlertmanager> {
  const dir = mkdtempSync(join(tmpdir(), "wr-alertmanager-"));
  const configFile = join(dir, "alertmanager.yml");
  writeFileSync(configFile, configYaml);
  const output: string[] = [];
  let child: ChildProcess;
  let url: string;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
  };
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    output.length = 0;
    child = spawn(
      ALERTMANAGER_BINARY,
      [
        `--config.file=${configFile}`,
        `--storage.path=${join(dir, "data")}`,
        `--web.listen-address=127.0.0.1:${port}`,
        "--cluster.listen-address=",
        // What it writes into client_url and source: a fixed name, not this machine's.
        "--web.external-url=http://alertmanager.example.test:9093",
        "--log.level=debug",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    child.stdout!.on("data", (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr!.on("data", (chunk: Buffer) => output.push(chunk.toString()));
    // After its output has been read to the end.
    const closed = new Promise((resolve) => child.once("close", resolve));
    const deadline = Date.now() + 20_000;
    for (;;) {
      if (child.exitCode !== null) {
        await closed;
        // Another program took the port between the probe and the bind: try another.
        if (attempt < 3 && /address already in use/.test(output.join(""))) break;
        await stop();
        throw new Error(`alertmanager exited with code ${child.exitCode}:\n${output.join("")}`);
      }
      // Its own answer, not another program's on a port it failed to bind (which may never answer).
      const ready = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(2000) }).then(
        (r) => r.ok && child.pid !== undefined && listensOn(child.pid, port) !== false,
        () => false,
      );
      if (ready) break;
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`alertmanager did not become ready:\n${output.join("")}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    if (child.exitCode === null) break;
  }
  return {
    url,
    output,
    async postAlerts(alerts) {
      const res = await fetch(`${url}/api/v2/alerts`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(alerts) });
      if (!res.ok) throw new Error(`alertmanager refused the alerts: ${res.status} ${await res.text()}`);
    },
    stop,
  };
}
