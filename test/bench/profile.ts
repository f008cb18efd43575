import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { type HeapProfiler, Session } from "node:inspector/promises";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import postgres from "postgres";
import { startCluster } from "../../services/process/cluster.js";
import { OWNER } from "../support/app.js";
import { startPrivateNats } from "../support/nats-server.js";
import { startPrivatePostgres } from "../support/postgres-server.js";
import { cpuTimes, startChild, stopChild, withoutBenchVariables } from "./child-process.js";
import { deliveryMix, everyFeatureWork, floor, ingestToken, load, startBenchApp, type LoadResult } from "./intake.js";
import { printTable } from "./stats.js";
import { natsCallCpuMs } from "./transport.js";

/**
 * `npm run bench -- profile`: where one delivery's time goes, in both modes, on a private
 * Postgres server with `pg_stat_statements` loaded (the shared server may lack it):
 *
 *  - Postgres time per statement (`pg_stat_statements`, reset when the measured window opens),
 *  - the internal RPCs as their callers see them (`warroom_rpc_duration_seconds` of each process),
 *  - pool wait (one-process mode): a `select 1` through the app's delivery pool every 20 ms,
 *    beside the same statement on a connection of its own; the difference is time queued for a
 *    connection,
 *  - event-loop lag of every process (`monitorEventLoopDelay`, read over the window),
 *  - CPU of the service processes, of Postgres and (over NATS) of nats-server over the window
 *    (`/proc`), and a CPU profile (`--cpu-prof`) of every service process summarized by package
 *    and by function,
 *  - with `BENCH_ALLOCATIONS=1` (one-process mode), the bytes the app allocates per delivery, freed
 *    or not, by where the code lives and by site (V8's sampling heap profiler over the window; with
 *    `BENCH_PROFILE_DIR` its `allocations.heapprofile` is kept there too).
 *
 * The load is the intake benchmark's (50 connections, the realistic mix). In one-process mode the
 * CPU is also measured for the delivery's transaction as one statement behind a bare server (the
 * intake benchmark's transaction floor): what Postgres spends when nothing is grouped.
 */

const PROBE_EVERY_MS = 20;

interface ChildStats {
  /** Bytes allocated over the window by site (`--allocations`), freed or not. */
  allocations?: AllocationSite[];
  loopP50: number;
  loopP99: number;
  loopMax: number;
  poolProbeMs: number;
  directProbeMs: number;
}

/**
 * `--profile-serve <databaseUrl> [--allocations <file>]`: the app, plus the pool-wait probe and
 * the event-loop monitor; with `--allocations`, V8's sampling heap profiler over the window,
 * counting the objects the collector has already freed too (garbage is what a delivery's
 * allocations cost), written to `file` for a profiler's own viewer.
 */
async function serveProfiledChild(databaseUrl: string, allocationsFile: string | undefined): Promise<void> {
  const running = await startBenchApp(databaseUrl);
  const inspector = allocationsFile ? new Session() : undefined;
  inspector?.connect();
  const direct = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  const loop = monitorEventLoopDelay({ resolution: 10 });
  let pool: number[] = [];
  let own: number[] = [];
  let probing = false;
  const probe = async () => {
    while (probing) {
      const t0 = performance.now();
      await running.database.sql`select 1`;
      const t1 = performance.now();
      await direct`select 1`;
      const t2 = performance.now();
      pool.push(t1 - t0);
      own.push(t2 - t1);
      await new Promise((r) => setTimeout(r, PROBE_EVERY_MS));
    }
  };
  let probing_: Promise<void> | undefined;
  process.on("message", async (message: string) => {
    if (message === "window-start") {
      loop.enable();
      loop.reset();
      pool = [];
      own = [];
      probing = true;
      probing_ = probe();
      await inspector?.post("HeapProfiler.startSampling", {
        samplingInterval: 16_384,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: true,
      });
      process.send!({ ack: "window-start" });
    } else if (message === "window-end") {
      probing = false;
      await probing_;
      loop.disable();
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / (xs.length || 1);
      const sampled = inspector ? (await inspector.post("HeapProfiler.stopSampling")).profile : undefined;
      if (sampled) writeFileSync(allocationsFile!, JSON.stringify(sampled));
      const stats: ChildStats = {
        ...(sampled ? { allocations: allocationSites(sampled) } : {}),
        loopP50: loop.percentile(50) / 1e6,
        loopP99: loop.percentile(99) / 1e6,
        loopMax: loop.max / 1e6,
        poolProbeMs: mean(pool),
        directProbeMs: mean(own),
      };
      process.send!({ stats });
    } else if (message === "stop") {
      await direct.end();
      await running.stop();
      process.exit(0);
    }
  });
  process.send!({ url: running.url, metricsUrl: running.metricsUrl });
}

// --- measurements read from outside -------------------------------------------------------------

function cpuSeconds(pid: number): number {
  return cpuTimes(pid).total;
}

/** Printed beside the kernel's share: how to read the `writeBuffer` and `writev` rows below it. */
const KERNEL_SHARE_NOTE =
  "(the kernel's share is the system calls' cost, socket writes included; V8's profiler charges samples taken as a system call returns to writeBuffer and writev, so those rows overstate it)";

/** Every process of the Postgres server (backends and background workers). */
async function postgresPids(admin: postgres.Sql): Promise<number[]> {
  const rows = await admin<{ pid: number }[]>`select pid from pg_stat_activity`;
  return rows.map((r) => r.pid);
}

interface RpcTimes {
  [method: string]: { sum: number; count: number };
}

/**
 * One scrape of a process's metrics: its RPC times so far, and its event-loop delay percentiles
 * since the previous scrape (prom-client resets its monitorEventLoopDelay histogram on each).
 */
async function scrape(metricsUrl: string): Promise<{ rpc: RpcTimes; loop: string }> {
  const res = await fetch(metricsUrl);
  // A wrong address must fail the run, not read as a process that made no calls.
  if (!res.ok) throw new Error(`${metricsUrl} answered ${res.status}`);
  const text = await res.text();
  return { rpc: rpcTimesOf(text), loop: loopLagOf(text) };
}

function loopLagOf(text: string): string {
  const read = (name: string) => Number(new RegExp(`^${name} ([\\d.e+-]+)$`, "m").exec(text)?.[1] ?? NaN) * 1000;
  return `${read("nodejs_eventloop_lag_p50_seconds").toFixed(1)} / ${read("nodejs_eventloop_lag_p99_seconds").toFixed(1)} / ${read("nodejs_eventloop_lag_max_seconds").toFixed(1)} ms`;
}

/** Where a cluster process serves its metrics. */
const metricsUrlOf = (p: { metricsPort: number }) => `http://127.0.0.1:${p.metricsPort}/metrics`;

async function rpcTimes(url: string): Promise<RpcTimes> {
  return (await scrape(url)).rpc;
}

function rpcTimesOf(text: string): RpcTimes {
  const out: RpcTimes = {};
  for (const line of text.split("\n")) {
    const m = /^warroom_rpc_duration_seconds_(sum|count)\{method="([^"]+)",transport="[^"]+",code="ok"\} ([\d.e+-]+)$/.exec(line);
    if (!m) continue;
    out[m[2]!] ??= { sum: 0, count: 0 };
    const entry = out[m[2]!]!;
    entry[m[1] as "sum" | "count"] += Number(m[3]);
  }
  return out;
}

function rpcDelta(before: RpcTimes, after: RpcTimes): { method: string; calls: number; meanMs: number }[] {
  return Object.entries(after)
    .map(([method, a]) => {
      const b = before[method] ?? { sum: 0, count: 0 };
      const calls = a.count - b.count;
      return { method, calls, meanMs: calls ? ((a.sum - b.sum) / calls) * 1000 : 0 };
    })
    .filter((r) => r.calls > 0);
}

interface StatementRow {
  query: string;
  calls: number;
  total: number;
  mean: number;
}

async function statements(admin: postgres.Sql, database: string): Promise<StatementRow[]> {
  return admin<StatementRow[]>`
    select s.query, s.calls::int as calls, s.total_exec_time as total, s.mean_exec_time as mean
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = ${database} and s.query not like '%pg_stat%'
    order by s.total_exec_time desc limit 12`;
}

/**
 * Postgres's time over every statement of the window, split by the schema a statement names
 * first: the capabilities own their schemas (incidents, intake, subscriptions, remotesource, ...),
 * so this is Postgres's time per delivery by capability.
 */
async function timeBySchema(admin: postgres.Sql, database: string): Promise<(deliveries: number) => Record<string, string | number>[]> {
  const rows = await admin<{ query: string; calls: number; total: number }[]>`
    select s.query, s.calls::int as calls, s.total_exec_time as total
    from pg_stat_statements s join pg_database d on d.oid = s.dbid
    where d.datname = ${database} and s.query not like '%pg_stat%'`;
  const bySchema = new Map<string, { statements: number; calls: number; total: number }>();
  for (const row of rows) {
    const schema = /\b(?:from|into|update|join)\s+"?([a-z_]+)"?\./i.exec(row.query)?.[1] ?? "(no schema: begin, commit, set, select 1)";
    const entry = bySchema.get(schema) ?? { statements: 0, calls: 0, total: 0 };
    entry.statements += 1;
    entry.calls += row.calls;
    entry.total += row.total;
    bySchema.set(schema, entry);
  }
  const all = [...bySchema.values()].reduce((a, e) => a + e.total, 0);
  return (deliveries) =>
    [...bySchema]
      .sort((a, b) => b[1].total - a[1].total)
      .map(([schema, e]) => ({
        schema,
        "distinct statements": e.statements,
        "calls per delivery": (e.calls / Math.max(1, deliveries)).toFixed(2),
        "ms per delivery": (e.total / Math.max(1, deliveries)).toFixed(3),
        share: `${((e.total / Math.max(all, 1e-9)) * 100).toFixed(0)} %`,
      }));
}

function perDelivery(rows: StatementRow[], deliveries: number) {
  return rows.map((r) => ({
    statement: r.query.replace(/\s+/g, " ").slice(0, 90),
    calls: r.calls,
    "per delivery": (r.calls / Math.max(1, deliveries)).toFixed(2),
    "mean ms": r.mean.toFixed(3),
    "ms per delivery": (r.total / Math.max(1, deliveries)).toFixed(3),
  }));
}

/** `BENCH_PROFILE_DIR=<dir>`: the raw profiles are copied there, for a profiler's own viewer. */
/**
 * The profiler's options for the service processes. `BENCH_CPU_PROFILE=off` runs them without it:
 * the sampler's own cost is per second, not per request, so at low rates it inflates the CPU per
 * request and can change which process limits the rate.
 */
function cpuProfiling(profDir: string): string[] {
  return process.env.BENCH_CPU_PROFILE === "off" ? [] : ["--cpu-prof", `--cpu-prof-dir=${profDir}`];
}

function keepProfiles(profDir: string): void {
  const keep = process.env.BENCH_PROFILE_DIR;
  if (keep) cpSync(profDir, keep, { recursive: true });
}

/** Self time of a `--cpu-prof` profile by package and by function, as shares of busy samples. */
function summarizeProfile(file: string, window: Window): { packages: Record<string, string>[]; functions: Record<string, string>[]; busy: number } {
  const profile = JSON.parse(readFileSync(file, "utf8")) as {
    nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
    startTime: number;
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const fnTime = new Map<string, number>();
  const pkgTime = new Map<string, number>();
  let busy = 0;
  let total = 0;
  // Sample times are the monotonic clock in microseconds, as process.hrtime reads it: only the
  // measured window counts (start-up, module loading and warm-up are left out).
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    at += dt;
    if (at < window.start || at > window.end) return;
    total += dt;
    const frame = byId.get(id)!;
    if (frame.functionName === "(idle)") return;
    busy += dt;
    const pkg = packageOf(frame.url, frame.functionName);
    pkgTime.set(pkg, (pkgTime.get(pkg) ?? 0) + dt);
    const fn = `${frame.functionName || "(anonymous)"} ${frame.url ? `${shortUrl(frame.url)}:${frame.lineNumber + 1}` : ""}`.trim();
    fnTime.set(fn, (fnTime.get(fn) ?? 0) + dt);
  });
  const share = (t: number) => `${((t / busy) * 100).toFixed(1)} %`;
  const top = (m: Map<string, number>, n: number) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
  return {
    busy: busy / Math.max(1, total),
    packages: top(pkgTime, 10).map(([name, t]) => ({ package: name, "share of busy time": share(t) })),
    functions: top(fnTime, 12).map(([name, t]) => ({ function: name.slice(0, 100), "self time": share(t) })),
  };
}

function packageOf(url: string, functionName: string): string {
  if (!url) return functionName.startsWith("(") ? functionName : "(native)";
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  if (url.startsWith("node:")) return `node:${url.slice(5).split("/")[1] ?? url.slice(5)}`;
  const svc = /\/(services|gen)\/([^/]+)/.exec(url);
  if (svc) return `${svc[1]}/${svc[2]}`;
  return basename(url);
}

interface AllocationSite {
  site: string;
  where: string;
  bytes: number;
}

/** A sampling heap profile's bytes by the function that allocated them. */
function allocationSites(profile: HeapProfiler.SamplingHeapProfile): AllocationSite[] {
  const sites = new Map<string, AllocationSite>();
  const walk = (node: HeapProfiler.SamplingHeapProfileNode) => {
    if (node.selfSize > 0) {
      const { functionName, url, lineNumber } = node.callFrame;
      const site = `${functionName || "(anonymous)"} ${shortUrl(url)}:${lineNumber + 1}`;
      const seen = sites.get(site) ?? { site, where: packageOf(url, functionName), bytes: 0 };
      seen.bytes += node.selfSize;
      sites.set(site, seen);
    }
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  return [...sites.values()].sort((a, b) => b.bytes - a.bytes);
}

/** Allocated bytes per delivery, by where the code lives and by the busiest sites. */
function printAllocations(label: string, sites: AllocationSite[], deliveries: number): void {
  const total = sites.reduce((a, s) => a + s.bytes, 0);
  const perDelivery = (bytes: number) => `${(bytes / Math.max(1, deliveries) / 1024).toFixed(2)} KiB`;
  const byWhere = new Map<string, number>();
  for (const s of sites) byWhere.set(s.where, (byWhere.get(s.where) ?? 0) + s.bytes);
  printTable(
    `${label}: bytes allocated per delivery over the window, freed or not (sampled), by where the code lives: ${perDelivery(total)} in all`,
    [...byWhere]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 12)
      .map(([where, bytes]) => ({ where, "per delivery": perDelivery(bytes), share: `${((bytes / total) * 100).toFixed(1)} %` })),
  );
  printTable(
    `${label}: the sites that allocate most`,
    sites.slice(0, 20).map((s) => ({ site: s.site, "per delivery": perDelivery(s.bytes), share: `${((s.bytes / total) * 100).toFixed(1)} %` })),
  );
}

function shortUrl(url: string): string {
  const nm = /node_modules\/(.*)$/.exec(url);
  if (nm) return nm[1]!;
  const svc = /\/((?:services|gen|test)\/.*)$/.exec(url);
  return svc ? svc[1]! : url;
}

function profiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".cpuprofile"))
    .map((f) => join(dir, f));
}

const throughputRow = (what: string, result: LoadResult) => ({
  what,
  "per second": result.perSecond,
  p50: `${result.p50.toFixed(1)} ms`,
  p99: `${result.p99.toFixed(1)} ms`,
});

const TRANSACTION_FLOOR = "floor (the delivery's transaction as one statement)";

function floorSide(cpu: { server: number; postgres: number }, requests: number, result: LoadResult, what = "floor (one INSERT)"): CpuSide {
  return { what, serviceMs: cpu.server * 1000, postgresMs: cpu.postgres * 1000, requests, loadMsPerRequest: result.loadCpuMsPerRequest };
}

/** Times the floor's window: CPU of its server and of Postgres. */
function floorWatch(admin: postgres.Sql, out: { server: number; postgres: number }) {
  return (pid: number) => {
    let pgPids: number[] = [];
    let before = { server: 0, postgres: 0 };
    return {
      async onStart() {
        pgPids = await postgresPids(admin);
        before = { server: cpuSeconds(pid), postgres: pgPids.reduce((a, p) => a + cpuSeconds(p), 0) };
      },
      async onEnd() {
        out.server = cpuSeconds(pid) - before.server;
        out.postgres = pgPids.reduce((a, p) => a + cpuSeconds(p), 0) - before.postgres;
      },
    };
  };
}

/** One side of a CPU comparison: CPU times over the window, in milliseconds. */
interface CpuSide {
  what: string;
  serviceMs: number;
  postgresMs: number;
  requests: number;
  loadMsPerRequest: number;
}

const perRequest = (side: CpuSide) => (side.serviceMs + side.postgresMs) / Math.max(1, side.requests) + side.loadMsPerRequest;

function cpuRow(side: CpuSide) {
  const per = (x: number) => (side.requests > 0 ? `${(x / side.requests).toFixed(3)} ms` : "n/a");
  return {
    what: side.what,
    requests: side.requests,
    "service CPU per request": per(side.serviceMs),
    "Postgres CPU per request": per(side.postgresMs),
    "load generator CPU per request": `${side.loadMsPerRequest.toFixed(3)} ms`,
    "total CPU per request": side.requests > 0 ? `${perRequest(side).toFixed(3)} ms` : "n/a",
  };
}

/**
 * CPU per request, ours beside the floor's (and any other floor measured), and what the target
 * share of the floor asks of the machine: the CPU time all its cores have for one request at that rate.
 */
function printCpu(label: string, share: number, floorPerSecond: number, ours: CpuSide, floorSide: CpuSide, ...otherFloors: CpuSide[]): void {
  printTable(`${label}: CPU per request (robust to a busy machine: the cost, not the wait)`, [ours, floorSide, ...otherFloors].map(cpuRow));
  const cores = availableParallelism();
  const budget = (cores * 1000) / (share * floorPerSecond);
  const oursMs = perRequest(ours);
  console.log(
    `\n${label}: at ${share} of the floor (${Math.round(share * floorPerSecond)}/s) ${cores} cores give ${budget.toFixed(3)} ms of CPU per request; ` +
      `the floor spends ${perRequest(floorSide).toFixed(3)} ms, ours ${oursMs.toFixed(3)} ms (${(oursMs / budget).toFixed(1)} times the budget)`,
  );
  // The most any service could do with what a delivery costs Postgres: one as cheap as the floor's
  // bare server, beside the same load generator, keeping the cores as busy as the floor kept them.
  const each = (ms: number, side: CpuSide) => ms / Math.max(1, side.requests);
  const oursPostgres = each(ours.postgresMs, ours);
  const ceilingMs = each(floorSide.serviceMs, floorSide) + oursPostgres + floorSide.loadMsPerRequest;
  const ceilingPerSecond = (floorPerSecond * perRequest(floorSide)) / ceilingMs;
  console.log(
    `${label}: a service no costlier than the floor's bare server, with Postgres at ours per request ` +
      `(${oursPostgres.toFixed(3)} ms, ${(oursPostgres / each(floorSide.postgresMs, floorSide)).toFixed(1)} times the floor's), ` +
      `would reach at most ${Math.round(ceilingPerSecond)}/s: ${(ceilingPerSecond / floorPerSecond).toFixed(2)} of the floor`,
  );
}

/**
 * Over NATS a delivery makes two internal calls (gateway to intake, intake to the incident core).
 * The least any such service could cost: one process as cheap as the floor's bare server, and
 * two calls at the bare transport's cost (`callMs`, nats-server included), with Postgres at ours.
 */
function printHopCeiling(share: number, floorPerSecond: number, postgresMs: number, requests: number, floorSide: CpuSide, callMs: number): void {
  const each = (ms: number, n: number) => ms / Math.max(1, n);
  const leastMs = each(floorSide.serviceMs, floorSide.requests) + 2 * callMs + each(postgresMs, requests) + floorSide.loadMsPerRequest;
  const ceilingPerSecond = (floorPerSecond * perRequest(floorSide)) / leastMs;
  const budget = (availableParallelism() * 1000) / (share * floorPerSecond);
  console.log(
    `separate processes: one internal call over NATS costs at least ${callMs.toFixed(3)} ms of CPU (256-byte echo, 50 in flight, caller, server and nats-server); ` +
      `a service as cheap as the floor's bare server plus two such calls, with Postgres at ours, needs ${leastMs.toFixed(3)} ms a request ` +
      `(the budget at ${share} of the floor is ${budget.toFixed(3)} ms) and would reach at most ${Math.round(ceilingPerSecond)}/s: ` +
      `${(ceilingPerSecond / floorPerSecond).toFixed(2)} of the floor`,
  );
}

// --- the two modes ----------------------------------------------------------------------------

async function privateServer() {
  // `BENCH_PG_TRACK=all` also counts statements run inside others (foreign-key checks, functions).
  const track = process.env.BENCH_PG_TRACK ?? "top";
  const pg = await startPrivatePostgres({ settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": track } });
  const admin = postgres(pg.url, { max: 2, onnotice: () => {} });
  await admin`create extension if not exists pg_stat_statements`;
  return { pg, admin };
}

async function freshOn(admin: postgres.Sql, baseUrl: string, name: string): Promise<string> {
  await admin.unsafe(`create database ${name}`);
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** The measured window on the monotonic clock, in microseconds. */
interface Window {
  start: number;
  end: number;
}

const monotonicMicros = () => Number(process.hrtime.bigint() / 1000n);

function printProfiles(dir: string, label: string, window: Window, names = new Map<number, string>()): void {
  // One file per thread; the module loader's worker thread is left out (the busiest is the main one).
  const byPid = new Map<string, { file: string; summary: ReturnType<typeof summarizeProfile> }>();
  for (const file of profiles(dir)) {
    const pid = /CPU\.\d+\.\d+\.(\d+)/.exec(basename(file))?.[1] ?? file;
    const summary = summarizeProfile(file, window);
    const seen = byPid.get(pid);
    if (!seen || seen.summary.busy < summary.busy) byPid.set(pid, { file, summary });
  }
  for (const { file, summary } of byPid.values()) {
    const pid = /CPU\.\d+\.\d+\.(\d+)/.exec(basename(file))?.[1] ?? basename(file);
    const name = names.get(Number(pid)) ?? `pid ${pid}`;
    printTable(
      `${label}: CPU profile of ${name} over the window (busy ${(summary.busy * 100).toFixed(0)} % of its samples), self time by package`,
      summary.packages,
    );
    printTable(`${label}: ${name}, top functions by self time`, summary.functions);
  }
}

async function profileOneProcess(): Promise<void> {
  const { pg, admin } = await privateServer();
  const profDir = mkdtempSync(join(tmpdir(), "wr-prof-"));
  try {
    const url = await freshOn(admin, pg.url, "bench_one");
    // PROFILE_BENCH_EVERY_FEATURE=1: every optional feature configured (intake.ts's everyFeatureWork).
    const features = process.env.PROFILE_BENCH_EVERY_FEATURE === "1" ? await everyFeatureWork() : undefined;
    // BENCH_ALLOCATIONS=1: where the app's allocations come from, per delivery (serveProfiledChild).
    const allocations = process.env.BENCH_ALLOCATIONS === "1";
    const allocationsArgs = allocations ? ["--allocations", join(profDir, "allocations.heapprofile")] : [];
    const app = await startChild(fileURLToPath(import.meta.url), ["--profile-serve", url, ...allocationsArgs], {
      nodeOptions: cpuProfiling(profDir),
      ...(features ? { env: features.env } : {}),
    });
    let stats: ChildStats | undefined;
    let cpu = { app: 0, appKernel: 0, postgres: 0, seconds: 0 };
    let before: RpcTimes = {};
    let after: RpcTimes = {};
    const ask = (message: string, key: "ack" | "stats") =>
      new Promise<unknown>((resolve) => {
        const on = (m: Record<string, unknown>) => {
          if (!(key in m)) return;
          app.child.off("message", on);
          resolve(m[key]);
        };
        app.child.on("message", on);
        app.child.send(message);
      });
    let result: LoadResult;
    let started = 0;
    let pgPids: number[] = [];
    let pgRows: StatementRow[] = [];
    let bySchema: Awaited<ReturnType<typeof timeBySchema>> = () => [];
    const window: Window = { start: 0, end: 0 };
    try {
      const token = await ingestToken(app.url);
      await features?.configure(app.url);
      result = await load([app.url], "/triggers", { authorization: `Bearer ${token}` }, deliveryMix("profile"), {
        async onStart() {
          await admin`select pg_stat_statements_reset()`;
          before = await rpcTimes(app.metricsUrl!);
          pgPids = await postgresPids(admin);
          const app0 = cpuTimes(app.child.pid!);
          cpu = { app: app0.total, appKernel: app0.kernel, postgres: pgPids.reduce((a, p) => a + cpuSeconds(p), 0), seconds: 0 };
          started = performance.now();
          window.start = monotonicMicros();
          await ask("window-start", "ack");
        },
        async onEnd() {
          window.end = monotonicMicros();
          const seconds = (performance.now() - started) / 1000;
          const app1 = cpuTimes(app.child.pid!);
          cpu = {
            app: app1.total - cpu.app,
            appKernel: app1.kernel - cpu.appKernel,
            postgres: pgPids.reduce((a, p) => a + cpuSeconds(p), 0) - cpu.postgres,
            seconds,
          };
          stats = (await ask("window-end", "stats")) as ChildStats;
          after = await rpcTimes(app.metricsUrl!);
          pgRows = await statements(admin, "bench_one");
          bySchema = await timeBySchema(admin, "bench_one");
        },
      });
    } finally {
      await stopChild(app.child);
      await features?.close();
    }
    const records = rpcDelta(before, after).find((r) => r.method.endsWith("/Record"))?.calls ?? 0;
    const floorCpu = { server: 0, postgres: 0 };
    const floorResult = await floor(url, floorWatch(admin, floorCpu));
    const floorRequests = Object.values(floorResult.statuses).reduce((a, b) => a + b, 0);
    const transactionCpu = { server: 0, postgres: 0 };
    const transactionResult = await floor(url, floorWatch(admin, transactionCpu), "transaction");
    const transactionRequests = Object.values(transactionResult.statuses).reduce((a, b) => a + b, 0);
    const deliveries = Object.values(result.statuses).reduce((a, b) => a + b, 0);
    printCpu(
      "one process",
      0.75,
      floorResult.perSecond,
      {
        what: "POST /triggers",
        serviceMs: cpu.app * 1000,
        postgresMs: cpu.postgres * 1000,
        requests: deliveries,
        loadMsPerRequest: result.loadCpuMsPerRequest,
      },
      floorSide(floorCpu, floorRequests, floorResult),
      floorSide(transactionCpu, transactionRequests, transactionResult, TRANSACTION_FLOOR),
    );
    printTable("one process: throughput beside the floors (same server, same run)", [
      throughputRow("POST /triggers", result),
      throughputRow("floor (one INSERT)", floorResult),
      throughputRow(TRANSACTION_FLOOR, transactionResult),
    ]);
    printTable(
      "one process: internal RPCs as the caller sees them (mean over the window)",
      rpcDelta(before, after).map((r) => ({ method: r.method, calls: r.calls, "mean ms": r.meanMs.toFixed(3) })),
    );
    printTable("one process: Postgres statements by total time (pg_stat_statements), per Record call", perDelivery(pgRows, records));
    printTable(
      `one process: Postgres time by the schema each statement names first, per delivery${features ? ` (${features.label.with})` : " (nothing optional configured)"}`,
      bySchema(deliveries),
    );
    printTable("one process: waits and CPU over the window", [
      { measure: "select 1 through the delivery pool (mean)", value: `${stats!.poolProbeMs.toFixed(2)} ms` },
      { measure: "select 1 on a connection of its own (mean)", value: `${stats!.directProbeMs.toFixed(2)} ms` },
      { measure: "pool wait (difference)", value: `${Math.max(0, stats!.poolProbeMs - stats!.directProbeMs).toFixed(2)} ms` },
      { measure: "event-loop delay p50 / p99 / max", value: `${stats!.loopP50.toFixed(1)} / ${stats!.loopP99.toFixed(1)} / ${stats!.loopMax.toFixed(1)} ms` },
      { measure: "CPU of the service process", value: `${((cpu.app / cpu.seconds) * 100).toFixed(0)} % of a core` },
      { measure: "of which in the kernel", value: `${((cpu.appKernel / Math.max(cpu.app, 1e-9)) * 100).toFixed(0)} %` },
      { measure: "CPU of Postgres (all its processes)", value: `${((cpu.postgres / cpu.seconds) * 100).toFixed(0)} % of a core` },
    ]);
    console.log(KERNEL_SHARE_NOTE);
    printProfiles(profDir, "one process", window, new Map([[app.child.pid!, "the app"]]));
    if (stats!.allocations) printAllocations("one process", stats!.allocations, deliveries);
  } finally {
    keepProfiles(profDir);
    rmSync(profDir, { recursive: true, force: true });
    await admin.end();
    await pg.cleanup();
  }
}

async function profileCluster(): Promise<void> {
  const { pg, admin } = await privateServer();
  const nats = await startPrivateNats();
  const profDir = mkdtempSync(join(tmpdir(), "wr-prof-"));
  try {
    const url = await freshOn(admin, pg.url, "bench_cluster");
    const cluster = await startCluster({
      env: {
        ...withoutBenchVariables(process.env),
        DATABASE_URL: url,
        NATS_URL: nats.url,
        HOST: "127.0.0.1",
        LOG_LEVEL: "warn",
        BOOTSTRAP_ORG_SLUG: OWNER.org,
        BOOTSTRAP_OWNER_EMAIL: OWNER.email,
        BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
        HEARTBEAT_SWEEP_SECONDS: "86400",
        SHUTDOWN_GRACE_SECONDS: "1",
        DATABASE_POOL_SIZE: process.env.INTAKE_BENCH_POOL_SIZE ?? "6",
      },
      nodeOptions: cpuProfiling(profDir),
      port: 0,
      gateways: 1,
      intakes: 1,
    });
    const watched = cluster.processes.filter((p) => ["gateway", "intake", "incidents"].includes(p.name));
    const before: Record<string, RpcTimes> = {};
    const after: Record<string, RpcTimes> = {};
    const cpuBefore: Record<string, number> = {};
    const cpu: Record<string, number> = {};
    const kernelBefore: Record<string, number> = {};
    const kernel: Record<string, number> = {};
    const lag: Record<string, string> = {};
    let pgPids: number[] = [];
    let pgRows: StatementRow[] = [];
    let started = 0;
    let seconds = 0;
    const window: Window = { start: 0, end: 0 };
    let result: LoadResult;
    const pidNames = new Map<number, string>();
    try {
      const token = await ingestToken(cluster.gatewayUrls[0]!);
      result = await load(cluster.gatewayUrls, "/triggers", { authorization: `Bearer ${token}` }, deliveryMix("profile-cluster"), {
        async onStart() {
          await admin`select pg_stat_statements_reset()`;
          pgPids = await postgresPids(admin);
          for (const p of watched) {
            before[p.name] = await rpcTimes(metricsUrlOf(p));
            const times = cpuTimes(p.child.pid!);
            cpuBefore[p.name] = times.total;
            kernelBefore[p.name] = times.kernel;
            pidNames.set(p.child.pid!, p.name);
          }
          cpuBefore.postgres = pgPids.reduce((a, p) => a + cpuSeconds(p), 0);
          cpuBefore["nats-server"] = cpuSeconds(nats.pid()!);
          started = performance.now();
          window.start = monotonicMicros();
        },
        async onEnd() {
          window.end = monotonicMicros();
          seconds = (performance.now() - started) / 1000;
          for (const p of watched) {
            const times = cpuTimes(p.child.pid!);
            cpu[p.name] = times.total - cpuBefore[p.name]!;
            kernel[p.name] = times.kernel - kernelBefore[p.name]!;
            const scraped = await scrape(metricsUrlOf(p));
            after[p.name] = scraped.rpc;
            lag[p.name] = scraped.loop;
          }
          cpu.postgres = pgPids.reduce((a, p) => a + cpuSeconds(p), 0) - cpuBefore.postgres!;
          cpu["nats-server"] = cpuSeconds(nats.pid()!) - cpuBefore["nats-server"]!;
          pgRows = await statements(admin, "bench_cluster");
        },
      });
    } finally {
      await cluster.stop();
    }
    const records = rpcDelta(before.intake ?? {}, after.intake ?? {}).find((r) => r.method.endsWith("/Record"))?.calls ?? 0;
    const floorCpu = { server: 0, postgres: 0 };
    const floorResult = await floor(url, floorWatch(admin, floorCpu));
    const floorRequests = Object.values(floorResult.statuses).reduce((a, b) => a + b, 0);
    const deliveries = Object.values(result.statuses).reduce((a, b) => a + b, 0);
    const callMs = await natsCallCpuMs(nats.url, () => cpuSeconds(nats.pid()!));
    // The bus carries every hop, so its server's CPU is the services' as much as their own.
    const servicesCpu = watched.reduce((a, p) => a + (cpu[p.name] ?? 0), 0) + (cpu["nats-server"] ?? 0);
    printCpu(
      "separate processes",
      0.5,
      floorResult.perSecond,
      {
        what: "POST /triggers (gateway + intake + incidents + nats-server)",
        serviceMs: servicesCpu * 1000,
        postgresMs: (cpu.postgres ?? 0) * 1000,
        requests: deliveries,
        loadMsPerRequest: result.loadCpuMsPerRequest,
      },
      floorSide(floorCpu, floorRequests, floorResult),
    );
    printHopCeiling(0.5, floorResult.perSecond, (cpu.postgres ?? 0) * 1000, deliveries, floorSide(floorCpu, floorRequests, floorResult), callMs);
    printTable("separate processes: throughput beside the floor (same server, same run)", [
      throughputRow("POST /triggers", result),
      throughputRow("floor (one INSERT)", floorResult),
    ]);
    printTable(
      "separate processes: internal RPCs as each caller sees them (mean over the window)",
      watched.flatMap((p) =>
        rpcDelta(before[p.name] ?? {}, after[p.name] ?? {}).map((r) => ({ caller: p.name, method: r.method, calls: r.calls, "mean ms": r.meanMs.toFixed(3) })),
      ),
    );
    printTable("separate processes: Postgres statements by total time (pg_stat_statements), per Record call", perDelivery(pgRows, records));
    printTable(
      "separate processes: CPU and event-loop delay (p50 / p99 / max) over the window",
      Object.entries(cpu).map(([name, s]) => ({
        process: name,
        cpu: `${((s / seconds) * 100).toFixed(0)} % of a core`,
        "in the kernel": kernel[name] === undefined ? "" : `${((kernel[name]! / Math.max(s, 1e-9)) * 100).toFixed(0)} %`,
        "event-loop delay": lag[name] ?? "",
      })),
    );
    console.log(KERNEL_SHARE_NOTE);
    for (const file of profiles(profDir)) {
      const pid = Number(/CPU\.\d+\.\d+\.(\d+)/.exec(basename(file))?.[1]);
      if (!pidNames.has(pid)) rmSync(file);
    }
    printProfiles(profDir, "separate processes", window, pidNames);
  } finally {
    keepProfiles(profDir);
    rmSync(profDir, { recursive: true, force: true });
    await nats.cleanup();
    await admin.end();
    await pg.cleanup();
  }
}

export async function benchProfile(): Promise<void> {
  const modes = (process.env.INTAKE_BENCH_MODES ?? "one,cluster").split(",");
  if (modes.includes("one")) await profileOneProcess();
  if (modes.includes("cluster")) await profileCluster();
}

if (process.argv[2] === "--profile-serve") {
  await serveProfiledChild(process.argv[3]!, process.argv[4] === "--allocations" ? process.argv[5] : undefined);
} else if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await benchProfile();
  process.exit(0);
}
