import type { ChildProcess } from "node:child_process";
import http from "node:http";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import postgres from "postgres";
import { allServices } from "../../services/all-services.js";
import { startCluster } from "../../services/cluster.js";
import { runProcess } from "../../services/runtime/process.js";
import { callApi, freshDatabase, OWNER } from "../support/app.js";
import { startPrivateNats } from "../support/nats-server.js";
import { printTable, summarize } from "./stats.js";
import { startChild, stopChild } from "./child-process.js";

/**
 * Trigger intake under load: sustained deliveries per second and latency through `POST /triggers`
 * at 50 concurrent keep-alive connections with a realistic mix (new alerts, repeats,
 * redeliveries, recoveries), against the real Postgres server,
 *
 *  - in one-process mode (the whole app in one child process, as `npm start` runs it), and
 *  - with every service as its own process over NATS (a private nats-server), as in production,
 *
 * each beside its floor measured in the same run: a bare node:http server in a child process
 * doing one INSERT per request into a table, loaded by the same client. This process only
 * generates load. `INTAKE_BENCH_SECONDS` sets the measured window (default 15 s per run).
 *
 * `INTAKE_BENCH_TRACING=<rounds>` adds the cost of tracing in one-process mode: the app run in
 * turn with no OTEL_* variable and with every delivery traced and exported to a local OTLP sink
 * (and, with `INTAKE_BENCH_BASELINE=<another checkout>`, that checkout's app), `rounds` times each;
 * `INTAKE_BENCH_TOGETHER=1` runs the variants of a round at the same time instead of in turn.
 */

const CONNECTIONS = 50;
const WARMUP_MS = 3_000;
const MEASURE_MS = Number(process.env.INTAKE_BENCH_SECONDS ?? 15) * 1000;
const TARGETS = { onePerSecond: 4000, clusterPerSecond: 2500, p99Ms: 50 };

type ChildMessage = { url: string };

// --- child processes -------------------------------------------------------------------------

/** `--serve <databaseUrl>`: the whole app; `--floor <databaseUrl>`: the bare INSERT server. */
async function serveChild(): Promise<void> {
  const [, , mode, databaseUrl] = process.argv;
  if (mode === "--floor") {
    const sql = postgres(databaseUrl!, { max: 10, onnotice: () => {} });
    await sql`create table if not exists bench_floor (id bigserial primary key, received_at timestamptz not null default now(), body jsonb not null)`;
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        sql`insert into bench_floor (body) values (${text}::jsonb) returning id`.then(
          ([row]) => {
            const answer = JSON.stringify({ id: String(row!.id) });
            res.writeHead(201, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) });
            res.end(answer);
          },
          () => {
            res.writeHead(500);
            res.end();
          },
        );
      });
    });
    server.keepAliveTimeout = 60_000;
    server.listen(0, "127.0.0.1", () => process.send!({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}` }));
    process.on("message", async (message: string) => {
      if (message === "stop") {
        await sql.end();
        process.exit(0);
      }
    });
    return;
  }
  const running = await runProcess({
    name: "bench",
    services: allServices,
    gateway: true,
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl!,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      BOOTSTRAP_ORG_SLUG: OWNER.org,
      BOOTSTRAP_OWNER_EMAIL: OWNER.email,
      BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
      NATS_URL: "",
      HEARTBEAT_SWEEP_SECONDS: "86400",
    },
  });
  process.on("message", async (message: string) => {
    if (message === "cpu") process.send!({ cpu: process.cpuUsage() });
    if (message === "stop") {
      await running.stop();
      process.exit(0);
    }
  });
  process.send!({ url: running.url });
}



// --- the delivery mix ------------------------------------------------------------------------

/**
 * A metrics-monitor stream as a busy organization sends it: new alerts (each opens), repeats of
 * alerts already seen with a new event id (attached, recorded), exact redeliveries of an earlier
 * notification (attached, not recorded), and recoveries of seen alerts (recorded).
 */
function deliveryMix(run: string) {
  const seen: string[] = [];
  const sent: string[] = [];
  let sequence = 0;
  const body = (alertId: string, transition: string) =>
    JSON.stringify({
      title: `[${transition} on {host:web-${alertId.slice(-2)}}] High CPU on web hosts`,
      body: "CPU above 90% for 5 minutes",
      alert_id: alertId,
      alert_transition: transition,
      alert_type: transition === "Recovered" ? "success" : "error",
      alert_priority: "P2",
      event_id: `${run}-e${++sequence}`,
      tags: ["env:prod", `service:svc-${alertId.slice(-1)}`, "team:payments"],
      link: "https://monitor.example.com/event/jump_to?event_id=1",
      date: String(Date.now()),
    });
  return function next(): { kind: string; body: string } {
    const roll = Math.random();
    const pick = (list: string[]) => list[Math.floor(Math.random() * list.length)]!;
    if (seen.length < 50 || roll < 0.4) {
      const alertId = `${run}-a${seen.length}`;
      seen.push(alertId);
      const text = body(alertId, "Triggered");
      sent.push(text);
      return { kind: "new", body: text };
    }
    if (roll < 0.75) {
      const text = body(pick(seen), "Re-Triggered");
      sent.push(text);
      return { kind: "repeat", body: text };
    }
    if (roll < 0.9) return { kind: "redelivery", body: pick(sent.slice(-5000)) };
    return { kind: "recovery", body: body(pick(seen), "Recovered") };
  };
}

// --- the client --------------------------------------------------------------------------------

interface LoadResult {
  /** CPU time the server process spent per answered request in the measured window, when measured. */
  cpuMsPerRequest?: number;
  perSecond: number;
  p50: number;
  p99: number;
  statuses: Record<string, number>;
  failures: number;
}

/** `CONNECTIONS` keep-alive connections, each posting back to back; only the measured window counts. */
async function load(urls: string[], path: string, headers: Record<string, string>, next: () => { body: string }, server?: ChildProcess): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  let counting = false;
  let stop = false;
  const samples: number[] = [];
  const statuses: Record<string, number> = {};
  let failures = 0;
  const one = (url: URL, body: string): Promise<number> =>
    new Promise((resolve, reject) => {
      const req = http.request(
        {
          host: url.hostname,
          port: url.port,
          path,
          method: "POST",
          agent,
          headers: { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(body) },
        },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  const targets = urls.map((u) => new URL(u));
  const workers = Array.from({ length: CONNECTIONS }, async (_, worker) => {
    const url = targets[worker % targets.length]!;
    while (!stop) {
      const { body } = next();
      const started = performance.now();
      let status: number;
      try {
        status = await one(url, body);
      } catch {
        if (counting) failures++;
        continue;
      }
      if (!counting) continue;
      samples.push(performance.now() - started);
      statuses[status] = (statuses[status] ?? 0) + 1;
    }
  });
  await new Promise((resolve) => setTimeout(resolve, WARMUP_MS));
  const cpuBefore = server ? await cpuOf(server) : undefined;
  counting = true;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, MEASURE_MS));
  counting = false;
  const seconds = (performance.now() - started) / 1000;
  const cpuAfter = server ? await cpuOf(server) : undefined;
  stop = true;
  await Promise.all(workers);
  agent.destroy();
  const s = summarize(samples);
  const cpuMs = cpuBefore && cpuAfter ? (cpuAfter.user + cpuAfter.system - cpuBefore.user - cpuBefore.system) / 1000 : undefined;
  return { perSecond: Math.round(s.n / seconds), p50: s.p50, p99: s.p99, statuses, failures, ...(cpuMs !== undefined && s.n > 0 ? { cpuMsPerRequest: cpuMs / s.n } : {}) };
}

/**
 * The server child's CPU time so far. On a machine shared with other work, throughput follows the
 * neighbours' load; CPU time per request is what the code under test costs.
 */
function cpuOf(child: ChildProcess): Promise<NodeJS.CpuUsage> {
  return new Promise((resolve) => {
    const onMessage = (m: { cpu?: NodeJS.CpuUsage }) => {
      if (!m.cpu) return;
      child.off("message", onMessage);
      resolve(m.cpu);
    };
    child.on("message", onMessage);
    child.send("cpu");
  });
}

async function ingestToken(url: string): Promise<string> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const login = await callApi(url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
    if (login.status === 200) {
      const issued = await callApi(url, "POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: login.body.accessToken });
      return issued.body.token as string;
    }
    if (Date.now() > deadline) throw new Error(`login failed: ${login.status}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function countRows(databaseUrl: string): Promise<{ incidents: number; entries: number }> {
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ incidents: number; entries: number }[]>`
      select (select count(*)::int from incidents.incidents) as incidents, (select count(*)::int from incidents.timeline_entries) as entries`;
    return row!;
  } finally {
    await sql.end();
  }
}

async function floor(databaseUrl: string): Promise<LoadResult> {
  const server = await startChild(fileURLToPath(import.meta.url), ["--floor", databaseUrl]);
  try {
    const next = deliveryMix("floor");
    return await load([server.url], "/", {}, next);
  } finally {
    await stopChild(server.child);
  }
}

/** Accepts OTLP exports and drops them: the cost measured is the app's, not a collector's. */
async function startOtlpSink(): Promise<{ url: string; requests: () => number; close(): Promise<void> }> {
  let requests = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      requests++;
      res.writeHead(200, { "content-type": "application/x-protobuf" });
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    requests: () => requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The app in one process, from `entry` (this file, or the same file of another checkout), with the environment given. */
async function oneProcessRun(entry: string, env: NodeJS.ProcessEnv, run: string): Promise<LoadResult> {
  const database = await freshDatabase();
  try {
    const app = await startChild(entry, ["--serve", database.url], env);
    try {
      const token = await ingestToken(app.url);
      return await load([app.url], "/triggers", { authorization: `Bearer ${token}` }, deliveryMix(run), app.child);
    } finally {
      await stopChild(app.child);
    }
  } finally {
    await database.drop();
  }
}

/**
 * Tracing off (no OTEL_*) and on (every delivery traced and exported to a local sink), and, with
 * INTAKE_BENCH_BASELINE naming another checkout, that checkout's code with no OTEL_* either: run
 * in turn `rounds` times, so drift in the machine's load falls on all alike; medians side by side.
 */
async function tracingComparison(rounds: number): Promise<void> {
  const untraced = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("OTEL_")));
  const sink = await startOtlpSink();
  const ours = fileURLToPath(import.meta.url);
  const baselineDir = process.env.INTAKE_BENCH_BASELINE;
  const variants = [
    ...(baselineDir ? [{ label: "baseline checkout, no OTEL_*", entry: join(baselineDir, "test/bench/intake.ts"), env: untraced }] : []),
    { label: "off (no OTEL_*)", entry: ours, env: untraced },
    { label: "on (all traced)", entry: ours, env: { ...untraced, OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_TRACES_SAMPLER: "always_on" } },
  ];
  const results = variants.map(() => [] as LoadResult[]);
  const together = process.env.INTAKE_BENCH_TOGETHER === "1";
  try {
    for (let round = 0; round < rounds; round++) {
      if (together) {
        // All variants at once, each under its own load: whatever else the machine runs weighs on them alike.
        const runs = await Promise.all(variants.map((variant, i) => oneProcessRun(variant.entry, variant.env, `v${i}r${round}`)));
        runs.forEach((run, i) => results[i]!.push(run));
      } else {
        for (const [i, variant] of variants.entries()) results[i]!.push(await oneProcessRun(variant.entry, variant.env, `v${i}r${round}`));
      }
    }
  } finally {
    await sink.close();
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  const medianCpu = (runs: LoadResult[]) => median(runs.map((r) => r.cpuMsPerRequest ?? Number.NaN));
  printTable(
    `One process, ${rounds} rounds of ${variants.length} runs ${together ? "at the same time" : "in turn"}; CPU is the server process's per delivery`,
    variants.map((variant, i) => {
      const runs = results[i]!;
      return {
        tracing: variant.label,
        "deliveries/s (each run)": runs.map((r) => r.perSecond).join(", "),
        "median deliveries/s": median(runs.map((r) => r.perSecond)),
        "median p50": ms(median(runs.map((r) => r.p50))),
        "median p99": ms(median(runs.map((r) => r.p99))),
        "CPU ms/delivery (each run)": runs.map((r) => r.cpuMsPerRequest?.toFixed(3) ?? "?").join(", "),
        "median CPU ms/delivery": medianCpu(runs).toFixed(3),
        "5xx": runs.reduce((n, r) => n + Object.entries(r.statuses).filter(([s]) => s.startsWith("5")).reduce((m, [, c]) => m + c, 0), 0),
      };
    }),
  );
  const at = (label: string) => variants.findIndex((v) => v.label.startsWith(label));
  const compare = (a: number, b: number, what: string) => {
    const throughput = median(results[a]!.map((r) => r.perSecond)) / median(results[b]!.map((r) => r.perSecond));
    const cpu = medianCpu(results[a]!) / medianCpu(results[b]!);
    console.log(`${what}: ${(throughput * 100).toFixed(1)} % of the deliveries per second, ${(cpu * 100).toFixed(1)} % of the CPU per delivery`);
  };
  console.log("");
  compare(at("on"), at("off"), "tracing on / off");
  if (baselineDir) compare(at("off"), at("baseline"), "off / baseline checkout");
  console.log(`the sink took ${sink.requests()} exports`);
}

async function onePerProcessMode(): Promise<{ ours: LoadResult; floor: LoadResult; rows: { incidents: number; entries: number } }> {
  const database = await freshDatabase();
  try {
    const app = await startChild(fileURLToPath(import.meta.url), ["--serve", database.url]);
    let ours: LoadResult;
    try {
      const token = await ingestToken(app.url);
      ours = await load([app.url], "/triggers", { authorization: `Bearer ${token}` }, deliveryMix("one"), app.child);
    } finally {
      await stopChild(app.child);
    }
    const rows = await countRows(database.url);
    return { ours, floor: await floor(database.url), rows };
  } finally {
    await database.drop();
  }
}

async function clusterMode(): Promise<{ ours: LoadResult; floor: LoadResult; rows: { incidents: number; entries: number }; shape: string }> {
  const gateways = Number(process.env.INTAKE_BENCH_GATEWAYS ?? 1);
  const intakes = Number(process.env.INTAKE_BENCH_INTAKES ?? 1);
  const database = await freshDatabase();
  const nats = await startPrivateNats();
  try {
    const cluster = await startCluster({
      env: {
        ...process.env,
        DATABASE_URL: database.url,
        NATS_URL: nats.url,
        HOST: "127.0.0.1",
        LOG_LEVEL: "warn",
        BOOTSTRAP_ORG_SLUG: OWNER.org,
        BOOTSTRAP_OWNER_EMAIL: OWNER.email,
        BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
        HEARTBEAT_SWEEP_SECONDS: "86400",
        SHUTDOWN_GRACE_SECONDS: "1",
        // Every process has its own pool; the server allows 100 connections in all.
        DATABASE_POOL_SIZE: process.env.INTAKE_BENCH_POOL_SIZE ?? "6",
      },
      port: 0,
      gateways,
      intakes,
    });
    let ours: LoadResult;
    try {
      const token = await ingestToken(cluster.gatewayUrls[0]!);
      ours = await load(cluster.gatewayUrls, "/triggers", { authorization: `Bearer ${token}` }, deliveryMix("cluster"));
    } finally {
      await cluster.stop();
    }
    const rows = await countRows(database.url);
    const shape = `${gateways} gateway(s), ${intakes} intake(s), identity, incidents (+ idle heartbeats, comms, remotesource)`;
    return { ours, floor: await floor(database.url), rows, shape };
  } finally {
    await nats.cleanup();
    await database.drop();
  }
}

const ms = (value: number) => `${value.toFixed(1)} ms`;

function row(mode: string, ours: LoadResult, floorResult: LoadResult) {
  return {
    mode,
    "ours (deliveries/s)": ours.perSecond,
    "ours p50": ms(ours.p50),
    "ours p99": ms(ours.p99),
    "floor (INSERTs/s)": floorResult.perSecond,
    "floor p50": ms(floorResult.p50),
    "floor p99": ms(floorResult.p99),
    "ours / floor": `${((ours.perSecond / floorResult.perSecond) * 100).toFixed(0)} %`,
    ...(ours.cpuMsPerRequest !== undefined ? { "ours CPU ms/delivery": ours.cpuMsPerRequest.toFixed(3) } : {}),
  };
}

export async function benchIntake(): Promise<void> {
  const modes = (process.env.INTAKE_BENCH_MODES ?? "one,cluster").split(",");
  const rows = [];
  const details = [];
  const verdicts: string[] = [];
  if (modes.includes("one")) {
    const one = await onePerProcessMode();
    rows.push(row("one process", one.ours, one.floor));
    details.push({ mode: "one process", statuses: JSON.stringify(one.ours.statuses), "client failures": one.ours.failures, incidents: one.rows.incidents, "timeline entries": one.rows.entries });
    verdicts.push(`one process: ${one.ours.perSecond}/s (target ${TARGETS.onePerSecond}), p99 ${ms(one.ours.p99)} (target < ${TARGETS.p99Ms} ms)`);
  }
  if (modes.includes("cluster")) {
    const cluster = await clusterMode();
    rows.push(row("separate processes over NATS", cluster.ours, cluster.floor));
    details.push({ mode: cluster.shape, statuses: JSON.stringify(cluster.ours.statuses), "client failures": cluster.ours.failures, incidents: cluster.rows.incidents, "timeline entries": cluster.rows.entries });
    verdicts.push(`separate processes: ${cluster.ours.perSecond}/s (target ${TARGETS.clusterPerSecond}), p99 ${ms(cluster.ours.p99)} (target < ${TARGETS.p99Ms} ms)`);
  }
  printTable(`POST /triggers at ${CONNECTIONS} keep-alive connections, ${MEASURE_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up; mix 40 % new, 35 % repeat, 15 % redelivery, 10 % recovery`, rows);
  printTable("Answers and rows written", details);
  console.log(`\n${verdicts.join("\n")}`);
  const tracingRounds = Number(process.env.INTAKE_BENCH_TRACING ?? 0);
  if (tracingRounds > 0) await tracingComparison(tracingRounds);
}

if (process.argv[2] === "--serve" || process.argv[2] === "--floor") {
  await serveChild();
} else if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await benchIntake();
  process.exit(0);
}
