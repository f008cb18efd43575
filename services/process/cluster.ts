import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Starts every service as its own process against DATABASE_URL and NATS_URL, with `gateways`
 * gateway replicas and `intakes` intake replicas: the production shape on one machine.
 */
export interface ClusterOptions {
  env: NodeJS.ProcessEnv;
  /** Port of the first gateway; the others follow. 0 picks free ports. */
  port: number;
  gateways: number;
  intakes: number;
  /** More processes beside the plan, each with its own extra environment (e.g. a third sweeper). */
  extra?: { name: string; env: NodeJS.ProcessEnv }[];
  /** Environment of one service's processes only (e.g. its own NATS credentials). */
  envFor?: (name: string) => NodeJS.ProcessEnv;
  /** Where the processes' logs go: the terminal, nowhere, or kept on each ClusterProcess. */
  output?: "inherit" | "ignore" | "capture";
  /** Node options for every process that NODE_OPTIONS may not carry (e.g. `--cpu-prof`). */
  nodeOptions?: string[];
  /**
   * The folder holding each service's folder with its `main`: by default the one beside this
   * module, whose `main.ts` run through tsx and whose compiled `main.js` run as they are.
   */
  servicesDir?: string;
}

export interface ClusterProcess {
  name: string;
  port: number;
  /** Where the process serves GET /metrics (METRICS_PORT). */
  metricsPort: number;
  env?: NodeJS.ProcessEnv;
  child: ChildProcess;
  /** The log lines printed so far, with output "capture". */
  output: string[];
  /** How often the process ended on its own and was started again. */
  restarts?: number;
}

/** A process that ends on its own this often while the cluster starts is broken, not unlucky. */
const START_RESTARTS = 3;

export interface Cluster {
  /** The environment every process started with. */
  env: NodeJS.ProcessEnv;
  gatewayUrls: string[];
  processes: ClusterProcess[];
  stop(): Promise<void>;
}

const SERVICES_DIR = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The service folders that run as their own process (each has a main, compiled or not). */
export function serviceFolders(servicesDir = SERVICES_DIR): string[] {
  return readdirSync(servicesDir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && !["runtime", "all", "gateway", "console"].includes(d.name))
    .filter((d) => existsSync(join(servicesDir, d.name, "main.ts")) || existsSync(join(servicesDir, d.name, "main.js")))
    .map((d) => d.name);
}

/**
 * A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it), for a process about
 * to start.
 */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * Whether process `pid` holds the socket listening on TCP `port`, from Linux's /proc; undefined
 * where /proc cannot tell. A port picked free can be taken by another program before the child
 * binds it: the child then fails and is restarted on new ports, while a stranger answers on the
 * old one, so an answer on the port alone does not say the child is ready.
 */
export function listensOn(pid: number, port: number): boolean | undefined {
  const suffix = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  const listening = new Set<string>();
  try {
    for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
      for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
        const fields = line.trim().split(/\s+/);
        // local address, state (0A: LISTEN), inode
        if (fields[1]?.endsWith(suffix) && fields[3] === "0A") listening.add(`socket:[${fields[9]}]`);
      }
    }
  } catch {
    return undefined;
  }
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false; // the process has ended
  }
  return fds.some((fd) => {
    try {
      return listening.has(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      return false; // closed since the listing
    }
  });
}

function entry(servicesDir: string, name: string): string[] {
  const compiled = join(servicesDir, name, "main.js");
  if (existsSync(compiled)) return ["--enable-source-maps", compiled];
  return ["--import", "tsx", join(servicesDir, name, "main.ts")];
}

/**
 * Starts every service as its own `main.ts` process, plus the gateways and intake replicas asked
 * for, restarting any that ends on its own; resolves once every one is ready (`/readyz`), with the
 * processes and a `stop()`.
 */
export async function startCluster(options: ClusterOptions): Promise<Cluster> {
  if (!options.env.DATABASE_URL || !options.env.NATS_URL) throw new Error("the cluster needs DATABASE_URL and NATS_URL");
  const plan: string[] = [];
  const servicesDir = options.servicesDir ?? SERVICES_DIR;
  for (const name of serviceFolders(servicesDir)) {
    const replicas = name === "intake" ? options.intakes : 1;
    for (let i = 0; i < replicas; i++) plan.push(name);
  }
  for (let i = 0; i < options.gateways; i++) plan.push("gateway");
  const processes: ClusterProcess[] = [];
  let stopping = false;
  /** Until every process is ready, nobody holds a gateway's address yet. */
  let starting = true;
  // The process object is complete once its first child is spawned; a restart replaces the child.
  const launch = (proc: Omit<ClusterProcess, "child"> & { child?: ChildProcess }, instance: number): ChildProcess => {
    const child = spawn(process.execPath, [...(options.nodeOptions ?? []), ...entry(servicesDir, proc.name)], {
      env: {
        ...options.env,
        ...options.envFor?.(proc.name),
        ...proc.env,
        PORT: String(proc.port),
        METRICS_PORT: String(proc.metricsPort),
        SERVICE_INSTANCE: `${proc.name}-${instance}`,
      },
      stdio: options.output === "inherit" ? ["ignore", "inherit", "inherit"] : options.output === "capture" ? ["ignore", "pipe", "pipe"] : "ignore",
    });
    for (const stream of [child.stdout, child.stderr]) {
      let partial = "";
      stream?.on("data", (chunk: Buffer) => {
        const lines = (partial + chunk.toString("utf8")).split("\n");
        partial = lines.pop() ?? "";
        proc.output.push(...lines);
      });
    }
    // Like a Kubernetes restart policy: a process that ends on its own is started again.
    // One killed with SIGKILL stays down, so tests can take a replica away.
    child.once("exit", (code, signal) => {
      if (stopping || signal === "SIGKILL") return;
      proc.restarts = (proc.restarts ?? 0) + 1;
      setTimeout(async () => {
        // A process that failed may have lost a port to another program (ports are picked free,
        // then bound by the child): one no one addresses by port gets new ones.
        if (code !== 0 && (proc.name !== "gateway" || (starting && !options.port))) {
          proc.port = await freePort();
          proc.metricsPort = await freePort();
        }
        if (!stopping) proc.child = launch(proc, instance);
      }, 500).unref();
    });
    return child;
  };
  let gatewayIndex = 0;
  for (const name of plan) {
    const port = name === "gateway" && options.port ? options.port + gatewayIndex++ : await freePort();
    const instance = processes.filter((p) => p.name === name).length;
    const proc: Omit<ClusterProcess, "child"> = { name, port, metricsPort: await freePort(), output: [] };
    processes.push(Object.assign(proc, { child: launch(proc, instance) }));
  }
  for (const extra of options.extra ?? []) {
    const instance = processes.filter((p) => p.name === extra.name).length;
    const proc: Omit<ClusterProcess, "child"> = { name: extra.name, port: await freePort(), metricsPort: await freePort(), env: extra.env, output: [] };
    processes.push(Object.assign(proc, { child: launch(proc, instance) }));
  }
  const cluster: Cluster = {
    env: options.env,
    // Set once every process is ready (a gateway that lost its port while starting has a new one).
    gatewayUrls: [],
    processes,
    async stop() {
      stopping = true;
      await Promise.all(
        processes.map(
          (p) =>
            new Promise<void>((resolve) => {
              if (p.child.exitCode !== null || p.child.signalCode !== null) return resolve();
              p.child.once("exit", () => resolve());
              p.child.kill("SIGTERM");
              setTimeout(() => p.child.kill("SIGKILL"), 8000).unref();
            }),
        ),
      );
    },
  };
  // Ready when every process answers /readyz on a port it holds itself.
  const deadline = Date.now() + 90_000;
  for (const p of processes) {
    for (;;) {
      if (p.child.exitCode !== null && (p.restarts ?? 0) >= START_RESTARTS) {
        await cluster.stop();
        const said = p.output.length > 0 ? `; its last output:\n${p.output.slice(-20).join("\n")}` : "";
        throw new Error(`${p.name} exited with code ${p.child.exitCode} while starting, ${START_RESTARTS} times${said}`);
      }
      // Bounded: a program that took the port may accept and never answer.
      const ok = await fetch(`http://127.0.0.1:${p.port}/readyz`, { signal: AbortSignal.timeout(5000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (ok && p.child.pid !== undefined && listensOn(p.child.pid, p.port) !== false) break;
      if (Date.now() > deadline) {
        await cluster.stop();
        const said = p.output.length > 0 ? `; its last output:\n${p.output.slice(-20).join("\n")}` : "";
        throw new Error(`${p.name} did not become ready in ${(90_000 / 1000).toFixed(0)} s${said}`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  starting = false;
  cluster.gatewayUrls = processes.filter((p) => p.name === "gateway").map((p) => `http://127.0.0.1:${p.port}`);
  return cluster;
}
