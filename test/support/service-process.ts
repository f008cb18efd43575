import { spawn, type ChildProcess } from "node:child_process";
import { resolve } from "node:path";
import { OWNER } from "./app.js";
import { nodeArgsFor } from "./compiled-services.js";
import { tempDataDir } from "./temp-data-dir.js";

export { tempDataDir };

const ROOT = resolve(import.meta.dirname, "../..");

/** The default one-process service (`npm start`), run as a child process as a user would. */
export interface ServiceProcess {
  child: ChildProcess;
  output(): string;
  /** Resolves with the port once the process logs that it serves, rejects if it exits first. */
  /** `metricsUrl` when the process serves metrics (METRICS_PORT). */
  serving: Promise<{ url: string; port: number; metricsUrl?: string }>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function embeddedEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: "",
    NATS_URL: "",
    DATA_DIR: dataDir,
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    BOOTSTRAP_ORG_SLUG: OWNER.org,
    BOOTSTRAP_OWNER_EMAIL: OWNER.email,
    BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
    SHUTDOWN_GRACE_SECONDS: "2",
    ...extra,
  };
}

/**
 * `cwd` runs another tree's entry (a previous release's, in the upgrade test). The entry runs
 * compiled when the run compiled it (test/support/compiled-services.ts); `tsx` runs the source
 * through tsx's loader, exactly as `npm start` does.
 */
export function startServiceProcess(env: Record<string, string>, entry = "services/all/main.ts", cwd = ROOT, options: { tsx?: boolean } = {}): ServiceProcess {
  const child = spawn(process.execPath, options.tsx ? ["--import", "tsx", entry] : nodeArgsFor(entry, cwd), {
    cwd,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const serving = new Promise<{ url: string; port: number; metricsUrl?: string }>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const match = /"port":(\d+)(?:,"metricsPort":(\d+))?[^\n]*"msg":"serving"/.exec(out);
      if (match)
        resolve({ url: `http://127.0.0.1:${match[1]}`, port: Number(match[1]), ...(match[2] ? { metricsUrl: `http://127.0.0.1:${match[2]}/metrics` } : {}) });
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    void exited.then(({ code, signal }) => reject(new Error(`the service exited (${code ?? signal}) before serving:\n${out}`)));
  });
  serving.catch(() => {});
  return { child, output: () => out, serving, exited };
}

/**
 * Polls until the path answers `status`, or throws after `timeoutMs`, a hang detector: a service
 * starts in seconds, but on two cores shared with a whole test run it has taken over 30 s.
 */
export async function waitFor(url: string, status = 200, timeoutMs = 90_000, intervalMs = 25): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const got = await fetch(url, { signal: AbortSignal.timeout(2000) }).then(
      async (r) => ({ status: r.status, body: await r.text().catch(() => "") }),
      () => ({ status: 0, body: "" }),
    );
    if (got.status === status) return;
    if (Date.now() > deadline) throw new Error(`${url} did not answer ${status} within ${timeoutMs} ms (last ${got.status} ${got.body.slice(0, 300)})`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
