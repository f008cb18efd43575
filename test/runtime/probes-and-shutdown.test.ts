import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createMethodRegistry } from "../../services/runtime/transport/unary-call.js";
import { connect } from "@nats-io/transport-node";
import { afterAll, describe, expect, it } from "vitest";
import { ContractService } from "../../gen/warroom/contract/v1/contract_pb.js";
import { allServices } from "../../services/process/all-services.js";
import { processAlive } from "../../services/runtime/data/data-dir-lock.js";
import { CHECK_BUDGET_MS } from "../../services/runtime/http/probes.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { createNatsTransport, serveOverNats } from "../../services/runtime/transport/nats-transport.js";
import { runProcess } from "../../services/process/run-process.js";
import { callApi, OWNER, startApp } from "../support/app.js";
import { registerContractService } from "../support/contract-service.js";
import { freePort, startPrivateNats } from "../support/nats-server.js";
import { embeddedEnv, startServiceProcess, tempDataDir, waitFor } from "../support/service-process.js";

const dirs: Array<{ cleanup(): void }> = [];
afterAll(() => {
  for (const d of dirs) d.cleanup();
});
const dataDir = () => {
  const d = tempDataDir("wr-probes-");
  dirs.push(d);
  return d.dir;
};
const credentials = { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org };

/**
 * Signals every process of the embedded Postgres of DATA_DIR: the server and its children (each
 * backend is a session of its own, so the server's process group does not reach them). SIGSTOP
 * makes the database hang with every connection open; SIGCONT resumes it.
 */
function signalPostgres(dir: string, signal: NodeJS.Signals): void {
  const postmaster = Number.parseInt(readFileSync(join(dir, "pg", "postmaster.pid"), "utf8"), 10);
  const children = execFileSync("ps", ["-o", "pid=", "--ppid", String(postmaster)], { encoding: "utf8" })
    .split("\n")
    .map((line) => Number(line.trim()))
    .filter((pid) => pid > 0);
  for (const pid of [postmaster, ...children]) {
    try {
      process.kill(pid, signal);
    } catch {
      // exited meanwhile
    }
  }
}

/**
 * A hang detector for a probe, not a budget: a probe gives up on a check after CHECK_BUDGET_MS
 * (1.5 s) by design, so the 503 itself shows the check did not wait on the stopped server; ten
 * times that means the probe hangs.
 */
const PROBE_HANG_MS = 10 * CHECK_BUDGET_MS;

async function timed<T>(work: Promise<T>): Promise<{ value: T; ms: number }> {
  const started = Date.now();
  const value = await work;
  return { value, ms: Date.now() - started };
}

const grpcHealth = (url: string, service = "") =>
  callApi(url, "POST", "/grpc.health.v1.Health/Check", { body: { service } }).then((r) => r.body.status as string);

describe("probes", () => {
  it("a script that waits for /readyz (or only /healthz) and logs in never sees 401", async () => {
    for (const probe of ["/readyz", "/healthz"]) {
      // A known port, polled from the moment the process is spawned, as a deploy script does
      // (not after the process logs that it serves).
      const port = await freePort();
      const service = startServiceProcess(embeddedEnv(dataDir(), { PORT: String(port) }));
      try {
        const url = `http://127.0.0.1:${port}`;
        await waitFor(`${url}${probe}`, 200, 90_000, 2);
        const first = await callApi(url, "POST", "/auth/login", { body: credentials });
        expect(first.status, JSON.stringify(first.body)).toBe(200);
      } finally {
        service.child.kill("SIGTERM");
        await service.exited;
      }
    }
  }, 240_000);

  it("/readyz answers 503 naming the database when Postgres hangs (the probe does not hang with it), /healthz stays 200: liveness is the process's own, gRPC health follows", async () => {
    const dir = dataDir();
    const running = await runProcess({
      name: "probes",
      services: allServices,
      gateway: true,
      env: { ...embeddedEnv(dir), LOG_LEVEL: "silent", SHUTDOWN_GRACE_SECONDS: "1" },
    });
    try {
      expect((await callApi(running.url, "GET", "/readyz")).status).toBe(200);
      expect(await grpcHealth(running.url)).toBe("SERVING");
      signalPostgres(dir, "SIGSTOP");
      const { value: ready, ms } = await timed(callApi(running.url, "GET", "/readyz"));
      expect(ready.status).toBe(503);
      expect(ready.body.failing).toContain("database");
      expect(ms).toBeLessThan(PROBE_HANG_MS);
      expect(await grpcHealth(running.url, "readiness")).toBe("NOT_SERVING");
      // However long the database hangs, the process is alive: restarting every replica at once
      // for a database they all share would mend nothing.
      for (let i = 0; i < 4; i++) {
        await new Promise((r) => setTimeout(r, 1500));
        const live = await callApi(running.url, "GET", "/healthz");
        expect(live.status).toBe(200);
        expect(live.body).toEqual({ status: "ok" });
        expect(await grpcHealth(running.url, "liveness")).toBe("SERVING");
        expect((await callApi(running.url, "GET", "/readyz")).status).toBe(503);
      }
      expect(await grpcHealth(running.url)).toBe("NOT_SERVING");
    } finally {
      signalPostgres(dir, "SIGCONT");
    }
    try {
      await waitFor(`${running.url}/readyz`, 200, 60_000);
      expect(await grpcHealth(running.url)).toBe("SERVING");
    } finally {
      await running.stop();
    }
  });

  it("/readyz names NATS/JetStream when the NATS server hangs, and the event loop when it was stuck", async () => {
    const nats = await startPrivateNats();
    const app = await startApp({ nats: nats.url });
    try {
      expect((await app.call("GET", "/readyz")).status).toBe(200);
      nats.signal("SIGSTOP");
      // A JetStream ping answered just before the stop can still stand for a probe: readiness turns
      // 503 naming JetStream within a few probes (a few CHECK_BUDGET_MS), and each probe answers
      // (PROBE_HANG_MS detects a hang). The probes go on for up to 20 budgets, a bound that means
      // "never", since on a machine busy enough the first few can all be late.
      const probingUntil = Date.now() + 20 * CHECK_BUDGET_MS;
      let ready: Awaited<ReturnType<typeof app.call>>;
      do {
        const probe = await timed(app.call("GET", "/readyz"));
        expect(probe.ms).toBeLessThan(PROBE_HANG_MS);
        ready = probe.value;
      } while (ready.status === 200 && Date.now() < probingUntil);
      expect(ready.status).toBe(503);
      expect(ready.body.failing).toContain("jetstream");
      nats.signal("SIGCONT");
      await waitFor(`${app.url}/readyz`, 200, 60_000);

      // A turn of the event loop that takes 2.5 s (a stuck loop) makes readiness fail for a while.
      const until = Date.now() + 2500;
      while (Date.now() < until) {
        // busy: nothing else runs
      }
      await new Promise((r) => setTimeout(r, 150));
      const after = await app.call("GET", "/readyz");
      expect(after.status).toBe(503);
      expect(after.body.failing).toContain("eventLoop");
      expect((await app.call("GET", "/healthz")).status).toBe(200);
    } finally {
      nats.signal("SIGCONT");
      await app.stop();
      await nats.cleanup();
    }
  });
});

describe("shutdown", () => {
  it("answers a request in flight before exiting on SIGTERM", async () => {
    const dir = dataDir();
    const service = startServiceProcess(embeddedEnv(dir, { SHUTDOWN_GRACE_SECONDS: "5" }));
    const { url } = await service.serving;
    await waitFor(`${url}/readyz`);
    const token = (await callApi(url, "POST", "/auth/login", { body: credentials })).body.accessToken as string;
    signalPostgres(dir, "SIGSTOP");
    let resumed = false;
    try {
      const inFlight = callApi(url, "GET", "/o/acme/incidents", { token });
      await new Promise((r) => setTimeout(r, 300));
      service.child.kill("SIGTERM");
      await new Promise((r) => setTimeout(r, 500));
      signalPostgres(dir, "SIGCONT");
      resumed = true;
      const answered = await inFlight;
      expect(answered.status).toBe(200);
      const { code } = await service.exited;
      expect(code).toBe(0);
    } finally {
      if (!resumed) signalPostgres(dir, "SIGCONT");
      service.child.kill("SIGKILL");
    }
  });

  it("ends on SIGTERM when Postgres hangs (the drain gives up after SHUTDOWN_GRACE_SECONDS), and the server does not outlive it", async () => {
    const dir = dataDir();
    const service = startServiceProcess(embeddedEnv(dir, { SHUTDOWN_GRACE_SECONDS: "2" }));
    const { url } = await service.serving;
    await waitFor(`${url}/readyz`);
    const postmaster = Number.parseInt(readFileSync(join(dir, "pg", "postmaster.pid"), "utf8"), 10);
    signalPostgres(dir, "SIGSTOP");
    try {
      const hanging = callApi(url, "POST", "/auth/login", { body: credentials }).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 300));
      const { ms } = await timed(
        (async () => {
          service.child.kill("SIGTERM");
          await service.exited;
        })(),
      );
      // A hang detector: the drain gives up after SHUTDOWN_GRACE_SECONDS (2 s) whatever hangs, so
      // the exit takes about 3 s; 30 s means the hung login holds the process.
      expect(ms).toBeLessThan(30_000);
      await hanging;
    } finally {
      signalPostgres(dir, "SIGCONT");
    }
    // Resumed, the server finds its service gone and stops.
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    while (processAlive(postmaster) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(processAlive(postmaster)).toBe(false);
  });

  it("a NATS call delivered after the drain began is refused at once, and the one in flight is answered", async () => {
    const nats = await startPrivateNats();
    const serverConn = await connect({ servers: nats.url });
    const clientConn = await connect({ servers: nats.url });
    try {
      const registry = createMethodRegistry();
      registerContractService(registry.router);
      const server = serveOverNats(serverConn, registry, { logger: createLogger("silent", "drain") });
      // The subscription is on the server before the first call, or that call finds no responder.
      await serverConn.flush();
      const client = createClient(ContractService, createNatsTransport(clientConn, { defaultTimeoutMs: 10_000 }));
      // The subscription answers before anything else is measured.
      expect((await client.echo({ payload: new Uint8Array([0]) })).payload).toEqual(new Uint8Array([0]));
      const slow = client.echo({ payload: new Uint8Array([1]), delayMs: 1500 });
      // Long enough for the slow call to reach its handler on a busy machine, well within its delay.
      await new Promise((r) => setTimeout(r, 500));
      const late = timed(
        client.echo({ payload: new Uint8Array([2]) }).then(
          () => "answered",
          (err) => ConnectError.from(err).code,
        ),
      );
      // "At once", without a clock: the late call is refused while the slow one is still in its
      // handler, so before the slow answer.
      const order: string[] = [];
      const drained = server.drain(5000);
      const slowAnswer = slow.then((answer) => {
        order.push("slow answered");
        return answer;
      });
      const refusal = late.then((result) => {
        order.push("late refused");
        return result;
      });
      expect((await slowAnswer).payload).toEqual(new Uint8Array([1]));
      const { value: code } = await refusal;
      expect(code).toBe(Code.Unavailable);
      await drained;
      expect(order).toEqual(["late refused", "slow answered"]);
    } finally {
      await clientConn.close();
      await serverConn.close();
      await nats.cleanup();
    }
  });
});
