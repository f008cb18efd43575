import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awaitImageBuild, holdContainerTestsLock } from "../support/image-build.js";
import { parse, parseAllDocuments } from "yaml";
import { serviceFolders } from "../../services/process/cluster.js";
import { configSchema, loadConfig } from "../../services/runtime/config/config.js";
import { callApi } from "../support/app.js";

/**
 * deploy/compose/compose.yaml, read: every service with its entry point, variables the
 * configuration schema knows and loads, and credentials handed out as the Kubernetes base does.
 *
 * Then run as a user runs it (deploy/README.md, "Try cluster mode with Docker
 * Compose"): the .env made by the README's own commands, `up -d`, the first login, trigger and
 * heartbeat ping through the published gateway, `down -v`. With `docker compose` (v2) when the
 * docker CLI has it, else Debian's docker-compose 1.29; both read the same file.
 *
 * No registry is reached: Postgres and NATS come from images this test builds on the Debian base
 * scripts/build-image.sh makes (test/deploy/compose-images/, Debian's postgresql-15 and
 * nats-server), named by POSTGRES_IMAGE and NATS_IMAGE, the variables compose.yaml offers for a
 * mirror. The compose file itself is the one users run.
 */

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const composeDir = join(root, "deploy/compose");
const image = process.env.WARROOM_IMAGE ?? "warroom:dev";
const project = `wr-compose-${process.pid}`;
const testImages = { postgres: "warroom-compose-test-postgres:15", nats: "warroom-compose-test-nats:2.9" };
const measured: Record<string, string | number> = {};
/** The ten containers: Postgres, NATS and every service (the gateway among them). */
const warroomServices = [...serviceFolders(), "gateway"];
const services = ["postgres", "nats", ...warroomServices];

let dockerHost: string;
let startedDaemon = false;
let compose: string[];
let workDir: string;
let env: Record<string, string>;
let url: string;
let natsAddress: string | undefined;

function run(command: string[], options: { allowFailure?: boolean; timeout?: number; cwd?: string; env?: NodeJS.ProcessEnv } = {}): string {
  const [file, ...args] = command;
  const result = spawnSync(file!, args, {
    encoding: "utf8",
    cwd: options.cwd ?? root,
    env: { ...process.env, DOCKER_HOST: dockerHost, ...options.env },
    timeout: options.timeout ?? 120_000,
  });
  if (result.status !== 0 && !options.allowFailure)
    throw new Error(`${command.join(" ")} failed (${result.status ?? result.signal}):\n${result.stderr || result.error?.message}`);
  return (result.stdout ?? "").trim();
}

function docker(args: string[], options: { allowFailure?: boolean; timeout?: number } = {}): string {
  return run(["docker", ...args], options);
}

/**
 * `docker compose` or `docker-compose` for this test's project, with the test's own variables on
 * top of the .env (the environment wins over .env in both).
 */
function composeRun(args: string[], options: { allowFailure?: boolean; timeout?: number } = {}): string {
  return run([...compose, "--project-name", project, "--file", join(composeDir, "compose.yaml"), "--env-file", join(workDir, ".env"), ...args], {
    ...options,
    env: {
      WARROOM_IMAGE: image,
      POSTGRES_IMAGE: testImages.postgres,
      NATS_IMAGE: testImages.nats,
      WARROOM_PORT: String(new URL(url).port),
      PUBLIC_URL: url,
      LOG_LEVEL: "warn",
      COMPOSE_HTTP_TIMEOUT: "300",
    },
  });
}

/** The Compose the machine has: the docker CLI's plugin (v2), else docker-compose (1.29 from Debian). */
function findCompose(): string[] {
  if (spawnSync("docker", ["compose", "version"], { encoding: "utf8" }).status === 0) return ["docker", "compose"];
  if (spawnSync("docker-compose", ["version"], { encoding: "utf8" }).status === 0) return ["docker-compose"];
  throw new Error("neither `docker compose` nor `docker-compose` runs here: apt-get install docker-compose (scripts/test.sh does)");
}

function script(path: string, args: string[], timeout: number): string {
  const result = spawnSync("bash", [join(root, path), ...args], { encoding: "utf8", cwd: root, timeout });
  if (result.status !== 0) throw new Error(`${path} ${args.join(" ")} failed (${result.status}):\n${result.stderr || result.error?.message}`);
  return result.stdout;
}

/**
 * A free port for the gateway, below the kernel's ephemeral range: the port is published only once
 * every other service is ready, and meanwhile a port from the ephemeral range could go to any
 * process listening on port 0.
 */
async function publishedPort(): Promise<number> {
  const ephemeralFrom = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  const top = ephemeralFrom > 11_024 ? ephemeralFrom - 1 : 65_535;
  for (;;) {
    const port = top - 10_000 + Math.floor(Math.random() * 10_000);
    const free = await new Promise<boolean>((resolvePort) => {
      const probe = createServer();
      probe.once("error", () => resolvePort(false));
      probe.listen(port, "127.0.0.1", () => probe.close(() => resolvePort(true)));
    });
    if (free) return port;
  }
}

/** The .env the README's block makes (run as the README shows it, in a folder of the test's own). */
function makeEnvFileAsTheReadmeSays(): Record<string, string> {
  const readme = readFileSync(join(root, "deploy/README.md"), "utf8");
  // Fences inside a list item are indented; the block runs as it renders, without that indent.
  const block = [...readme.matchAll(/^( *)```sh\n([\s\S]*?)^\1```/gm)]
    .map(([, indent, body]) => body!.replace(new RegExp(`^${indent}`, "gm"), ""))
    .find((b) => b.includes("cat > .env <<EOF"));
  if (!block) throw new Error("deploy/README.md has no sh block making .env (`cat > .env <<EOF`)");
  run(["bash", "-euo", "pipefail", "-c", block], { cwd: workDir });
  const values: Record<string, string> = {};
  for (const line of readFileSync(join(workDir, ".env"), "utf8").split("\n")) {
    const m = /^([A-Z_]+)=(.*)$/.exec(line);
    if (m) values[m[1]!] = m[2]!;
  }
  return values;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let containers: Map<string, string> | undefined;
/** The container of a compose service, by the labels both Compose versions put on it (one `docker ps` for all). */
function containerOf(service: string): string {
  if (!containers?.has(service)) {
    const rows = docker(["ps", "-a", "--filter", `label=com.docker.compose.project=${project}`, "--format", '{{.Label "com.docker.compose.service"}} {{.ID}}']);
    containers = new Map(rows.split("\n").map((row) => row.split(" ") as [string, string]));
  }
  const id = containers.get(service);
  if (!id) throw new Error(`no container for ${service}`);
  return id;
}

/** Each warroom service's health-check state (healthy, unhealthy, starting), in one `docker inspect`. */
function healthStates(): Map<string, string> {
  const states = docker(["inspect", "--format", "{{if .State.Health}}{{.State.Health.Status}}{{end}}", ...warroomServices.map(containerOf)], {
    allowFailure: true,
  }).split("\n");
  return new Map(warroomServices.map((s, i) => [s, states[i] ?? ""]));
}

/** An access token of the bootstrap owner of .env, asked until identity answers (it may still be starting). */
async function ownerToken(): Promise<string> {
  let last: unknown;
  for (let attempt = 0; attempt < 60; attempt++) {
    const login = await callApi(url, "POST", "/auth/login", {
      body: { email: env.BOOTSTRAP_OWNER_EMAIL, password: env.BOOTSTRAP_OWNER_PASSWORD, orgSlug: env.BOOTSTRAP_ORG_SLUG },
    });
    if (login.status === 200) return login.body.accessToken;
    // Only "not answering yet" (503, 504) is retried: a refused password fails at once.
    if (login.status < 500) throw new Error(`login as the bootstrap owner: ${login.status} ${JSON.stringify(login.body)}`);
    last = login.body;
    await sleep(1000);
  }
  throw new Error(`login as the bootstrap owner kept failing: ${JSON.stringify(last)}`);
}

/**
 * What NATS's monitoring endpoint says. Its port is not published: the test asks the container's
 * address on the compose network, which this machine reaches through the network's bridge.
 */
async function natsMonitor(path: string): Promise<any> {
  natsAddress ??= docker(["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", containerOf("nats")]);
  const res = await fetch(`http://${natsAddress}:8222${path}`, { signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw new Error(`NATS monitoring ${path}: ${res.status}`);
  return res.json();
}

let releaseLock: (() => void) | undefined;

async function upAsTheReadmeSays(): Promise<void> {
  releaseLock = await holdContainerTestsLock(1_800_000);
  const [host, started] = script("scripts/docker-daemon.sh", ["start"], 120_000).trim().split("\n");
  dockerHost = host!;
  startedDaemon = started === "started";
  compose = findCompose();
  measured.compose = run([...compose, "version", "--short"], { allowFailure: true }) || compose.join(" ");
  // Cached layers make these quick after the first build.
  await awaitImageBuild(1_800_000);
  if (!process.env.WARROOM_IMAGE) process.stderr.write(script("scripts/build-image.sh", [image], 900_000));
  for (const [name, tag] of Object.entries(testImages))
    run(["docker", "build", "--quiet", "--network", "host", "--tag", tag, join(root, "test/deploy/compose-images", name)], {
      timeout: 900_000,
      env: { DOCKER_BUILDKIT: "0" },
    });

  workDir = mkdtempSync(join(tmpdir(), "warroom-compose-"));
  url = `http://127.0.0.1:${await publishedPort()}`;
  env = makeEnvFileAsTheReadmeSays();

  const started_ = Date.now();
  // Returns once every container is created, which waits for Postgres's and NATS's health checks.
  try {
    composeRun(["up", "--detach"], { timeout: 300_000 });
  } catch (error) {
    throw new Error(`${(error as Error).message}\nthe services' logs:\n${composeRun(["logs", "--no-color", "--tail", "30"], { allowFailure: true })}`);
  }
  // As the README says: the gateway answers /readyz, and every service's health check (its /readyz)
  // has passed. Once is enough: on a machine loaded by other work a check can time out afterwards.
  const seenHealthy = new Set<string>();
  let gatewayReady = false;
  while (!gatewayReady || seenHealthy.size < warroomServices.length) {
    if (!gatewayReady) gatewayReady = (await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(5000) }).catch(() => undefined))?.status === 200;
    for (const [s, state] of healthStates()) if (state === "healthy") seenHealthy.add(s);
    // A bound that detects a hang, not a budget: under a quiet machine's minute.
    if (Date.now() - started_ > 420_000) {
      const unhealthy = warroomServices.filter((s) => !seenHealthy.has(s));
      const checks = unhealthy.map(
        (s) =>
          `${s}: ${healthStates().get(s)}, last checks: ${docker(["inspect", "--format", "{{json .State.Health.Log}}", containerOf(s)], { allowFailure: true }).slice(-600)}`,
      );
      const logs = composeRun(["logs", "--no-color", "--tail", "20", ...new Set(["gateway", ...unhealthy])], { allowFailure: true });
      throw new Error(
        `not ready after 420 s: ${gatewayReady ? "" : "the gateway's /readyz, "}${unhealthy.join(", ")}\n${checks.join("\n")}\ntheir logs:\n${logs}`,
      );
    }
    await sleep(500);
  }
  measured["up -d to every service healthy (ms)"] = Date.now() - started_;
}

function down(): void {
  try {
    // Always, also when start-up failed: the containers, the network and the volumes.
    if (workDir && compose) composeRun(["down", "--volumes", "--remove-orphans", "--timeout", "20"], { allowFailure: true, timeout: 180_000 });
    if (workDir) rmSync(workDir, { recursive: true, force: true });
    console.log("\nThe compose file, measured in this run:");
    console.table(measured);
    if (startedDaemon) script("scripts/docker-daemon.sh", ["stop"], 120_000);
  } finally {
    releaseLock?.();
  }
}

describe("deploy/compose/compose.yaml, read", () => {
  const file = parse(readFileSync(join(composeDir, "compose.yaml"), "utf8"), { merge: true });
  const example = readFileSync(join(composeDir, ".env.example"), "utf8");
  /** The variables of .env.example with a value in place of each REPLACE_ME, as a user's .env has them. */
  const dotEnv = Object.fromEntries(
    [...example.matchAll(/^([A-Z_]+)=(.*)$/gm)].map(([, key, value]) => [key!, value === "REPLACE_ME" ? `n${"0".repeat(47)}` : value!]),
  );
  /** Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}, and $$ for a dollar. */
  const interpolate = (value: unknown): string =>
    String(value).replace(/\$\$|\$\{([A-Z_]+)(?::([-?])([^}]*))?\}/g, (whole, key: string | undefined, kind, rest) => {
      if (!key) return "$";
      const found = dotEnv[key];
      if (found) return found;
      if (kind === "-") return rest;
      throw new Error(`${whole}: ${key} is neither in .env.example nor defaulted`);
    });
  const environment = (service: string): Record<string, string> =>
    Object.fromEntries(Object.entries(file.services[service].environment ?? {}).map(([k, v]) => [k, interpolate(v)]));
  /** The names of the variables a Kubernetes Deployment of deploy/base gives its container. */
  const baseEnv = (service: string): string[] => {
    const docs = parseAllDocuments(readFileSync(join(root, "deploy/base", `${service}.yaml`), "utf8")).map((d) => d.toJSON());
    const deployment = docs.find((d) => d?.kind === "Deployment");
    return (deployment.spec.template.spec.containers[0].env as { name: string }[]).map((e) => e.name);
  };

  it("names every service, each running its own entry point, besides postgres and nats", () => {
    expect(Object.keys(file.services).sort()).toEqual([...services].sort());
    for (const service of warroomServices) {
      expect(file.services[service].command, service).toEqual([`dist/services/${service}/main.js`]);
      expect(interpolate(file.services[service].image), service).toBe("warroom:dev");
    }
  });

  it("gives each service only variables the configuration schema knows, and a set that loads against Postgres and NATS", () => {
    const known = new Set(Object.keys(configSchema.shape));
    for (const service of warroomServices) {
      const env = environment(service);
      expect(
        Object.keys(env).filter((k) => !known.has(k)),
        service,
      ).toEqual([]);
      const config = loadConfig(env);
      expect(config.DATABASE_URL, service).toMatch(/^postgres:\/\/warroom:[^@]+@postgres:5432\/warroom$/);
      expect(config.NATS_URL, service).toBe("nats://nats:4222");
      expect(config.PORT, service).toBe(8080);
      expect(config.METRICS_PORT, service).toBe(9090);
    }
  });

  it("hands out the secrets key, the first owner's password and NATS users as the Kubernetes base does", () => {
    for (const service of warroomServices) {
      const env = file.services[service].environment;
      const base = baseEnv(service);
      for (const key of ["SECRETS_KEYS", "BOOTSTRAP_OWNER_PASSWORD"]) expect(key in env, `${service}: ${key}`).toBe(base.includes(key));
      expect(env.NATS_USER, service).toBe(service);
      expect(env.NATS_PASSWORD, service).toMatch(new RegExp(`^\\$\\{NATS_PASSWORD_${service.toUpperCase()}:`));
    }
    // The NATS server is given every password authorization.conf reads, and nothing else.
    const conf = readFileSync(join(root, "deploy/components/nats/authorization.conf"), "utf8");
    const read = [...conf.matchAll(/password: \$(NATS_PASSWORD_[A-Z]+)/g)].map((m) => m[1]!);
    expect(Object.keys(file.services.nats.environment).sort()).toEqual(read.sort());
    expect(read.sort()).toEqual(warroomServices.map((s) => `NATS_PASSWORD_${s.toUpperCase()}`).sort());
  });
});

describe("deploy/compose/compose.yaml, run", () => {
  beforeAll(upAsTheReadmeSays, 1_200_000);
  afterAll(down, 300_000);

  it("runs every service in its own hardened container beside Postgres and NATS, each with its health check", () => {
    const running = composeRun(["ps", "--services", "--filter", "status=running"]).split("\n").sort();
    expect(running).toEqual([...services].sort());
    for (const service of warroomServices) {
      const inspect = JSON.parse(docker(["inspect", containerOf(service)]))[0];
      expect(inspect.Config.Image, service).toBe(image);
      expect(inspect.Config.User, service).toBe("10001:10001");
      expect(inspect.HostConfig.ReadonlyRootfs, service).toBe(true);
      expect(inspect.HostConfig.CapDrop, service).toEqual(["ALL"]);
      expect(inspect.HostConfig.SecurityOpt, service).toContain("no-new-privileges:true");
      expect(Object.keys(inspect.HostConfig.Tmpfs ?? {}), service).toEqual(["/tmp"]);
      expect(inspect.Config.Healthcheck?.Test?.join(" "), service).toContain("/readyz");
      expect(inspect.HostConfig.RestartPolicy?.Name, service).toBe("unless-stopped");
      expect(inspect.Config.Env, service).toContain(`NATS_USER=${service}`);
    }
    // Only the gateway is published, and only on the loopback.
    const bindings = JSON.parse(docker(["inspect", "--format", "{{json .HostConfig.PortBindings}}", containerOf("gateway")]));
    expect(bindings).toEqual({ "8080/tcp": [{ HostIp: "127.0.0.1", HostPort: new URL(url).port }] });
    for (const other of services.filter((s) => s !== "gateway"))
      expect(JSON.parse(docker(["inspect", "--format", "{{json .HostConfig.PortBindings}}", containerOf(other)])) ?? {}, other).toEqual({});
  });

  it("asks NATS clients for credentials", async () => {
    expect((await natsMonitor("/varz")).auth_required).toBe(true);
    // One connection per service, each under its own user.
    const users = ((await natsMonitor("/connz?auth=true")).connections as { authorized_user?: string }[]).map((c) => c.authorized_user).sort();
    expect(new Set(users)).toEqual(new Set(warroomServices));
  });

  it("logs in as the bootstrap owner from .env, opens an incident from a trigger and reads it back", async () => {
    const token = await ownerToken();
    const org = env.BOOTSTRAP_ORG_SLUG!;
    const ingest = await callApi(url, "POST", `/o/${org}/triggers/ingest-token`, { token });
    expect(ingest.status).toBe(200);

    const trigger = await callApi(url, "POST", "/triggers", {
      token: ingest.body.token,
      body: { title: "compose smoke", alert_type: "error", alert_transition: "Triggered", alert_id: "compose-1", event_id: "compose-1-a" },
    });
    expect(trigger.status, JSON.stringify(trigger.body)).toBe(201);
    expect(trigger.body.outcome).toBe("opened");
    expect(trigger.body.workspaceUrl).toBe(`${url}/o/${org}/incidents/${trigger.body.incidentId}`);
    const incident = await callApi(url, "GET", `/o/${org}/incidents/${trigger.body.incidentId}`, { token });
    expect(incident.status).toBe(200);
    expect(JSON.stringify(incident.body)).toContain("compose smoke");

    // The incident's events went through JetStream, each service's consumer under its own user,
    // and every consumer took and acknowledged what it was sent.
    await expect
      .poll(async () => {
        const jsz = await natsMonitor("/jsz?accounts=true&streams=true&consumers=true");
        const streams = (jsz.account_details ?? []).flatMap((a: any) => a.stream_detail ?? []);
        const events = streams.find((s: any) => s.name === "EVENTS");
        const consumers = (events?.consumer_detail ?? []) as { name: string; num_pending: number; num_ack_pending: number }[];
        return {
          published: (events?.state?.messages ?? 0) > 0,
          consumers: consumers.length > 0,
          unfinished: consumers.filter((c) => c.num_pending > 0 || c.num_ack_pending > 0).map((c) => c.name),
        };
      })
      .toEqual({ published: true, consumers: true, unfinished: [] });
  });

  it("takes a heartbeat ping at the ping URL it hands out (sealed with SECRETS_KEYS)", async () => {
    const org = env.BOOTSTRAP_ORG_SLUG!;
    const token = await ownerToken();
    const made = await callApi(url, "POST", `/o/${org}/heartbeats`, {
      token,
      body: { name: "compose-backup", expectedIntervalSeconds: 86400, graceSeconds: 3600 },
    });
    expect(made.status, JSON.stringify(made.body)).toBeLessThan(300);
    const heartbeat = await callApi(url, "GET", `/o/${org}/heartbeats/compose-backup`, { token });
    const pingUrl = heartbeat.body.pingUrl as string;
    expect(pingUrl.startsWith(`${url}/ping/`), pingUrl).toBe(true);
    const ping = await fetch(pingUrl);
    expect(ping.status).toBe(200);
    expect(await ping.text()).toBe("OK");
    const after = await callApi(url, "GET", `/o/${org}/heartbeats/compose-backup`, { token });
    expect(after.body.lastPing).not.toBeNull();
  });

  it("down -v removes the containers and the volumes", () => {
    composeRun(["down", "--volumes", "--remove-orphans", "--timeout", "20"], { timeout: 180_000 });
    expect(docker(["ps", "-aq", "--filter", `label=com.docker.compose.project=${project}`])).toBe("");
    expect(docker(["volume", "ls", "-q", "--filter", `label=com.docker.compose.project=${project}`])).toBe("");
  });
});
