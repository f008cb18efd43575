import type { ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { availableParallelism } from "node:os";
import http from "node:http";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createClient } from "@connectrpc/connect";
import postgres from "postgres";
import { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { hashPingKey } from "../../services/heartbeats/ping/ping-key.js";
import { allServices } from "../../services/process/all-services.js";
import { runProcess } from "../../services/process/run-process.js";
import { callApi, OWNER } from "../support/app.js";
import { startPrivatePostgres } from "../support/postgres-server.js";
import { printTable } from "./stats.js";
import { startChild, stopChild } from "./child-process.js";
import { cpuDelta, postgresCpuMs } from "./postgres-cpu.js";

/**
 * Heartbeats under load: pings per second at 50 concurrent connections against a real Postgres,
 * and the time of one sweep with 100,000 registered heartbeats of which 1,000 are overdue.
 *
 * The service runs in a child process (the whole one-process app, as `npm start` runs it); this
 * process only generates load. Floors measured in the same run: a bare HTTP server answering 204
 * from a child process, and bare single-row UPDATEs by primary key at the same concurrency.
 * Beside the rates (which move with whatever else runs on the machine), the CPU each request costs
 * the service and Postgres, and the Postgres statements per ping (`pg_stat_statements`).
 * `--pings-only` skips the sweeps; `--cpu-prof` writes a CPU profile of the service process.
 */

const CONNECTIONS = 50;
const WARMUP_MS = 2_000;
const MEASURE_MS = 10_000;
const PING_HEARTBEATS = 1_000;
const REGISTERED = 100_000;
const OVERDUE = 1_000;

interface SweepFigures {
  ms: number;
  /** CPU time of the whole process (this service and the incident core it calls) during the sweep. */
  cpu: number;
  detectMs: number;
  deliverMs: number;
  silent: number;
  opened: number;
  delivered: number;
  failed: number;
}

type ChildMessage = { url: string } | { sweep: SweepFigures } | { cpuMs: number };

/**
 * Child side: `--serve <databaseUrl>` runs the app; `--bare-http` a server that only answers 204;
 * `--http-update <databaseUrl>` a server that does a ping's least: one single-row UPDATE by
 * primary key per request (the id in the path), then 204.
 */
async function serveChild(): Promise<void> {
  const mode = process.argv[2];
  if (mode === "--http-update") {
    const sql = postgres(process.argv[3]!, { max: 20, onnotice: () => {} });
    await sql`create table if not exists bench_http_floor (id int primary key, touched_at timestamptz)`;
    await sql`insert into bench_http_floor select g, now() from generate_series(1, ${PING_HEARTBEATS}) g on conflict do nothing`;
    serveFloor((req, res) => {
      req.resume();
      sql`update bench_http_floor set touched_at = now() where id = ${Number(req.url!.slice(1))}`.then(
        () => answer(res, 204),
        () => answer(res, 500),
      );
    });
    return;
  }
  if (mode === "--bare-http") {
    serveFloor((_req, res) => answer(res, 204));
    return;
  }
  const running = await runProcess({
    name: "bench",
    services: allServices,
    gateway: true,
    env: {
      DATABASE_URL: process.argv[3]!,
      SECRETS_KEYS: process.env.SECRETS_KEYS ?? "",
      DATABASE_POOL_SIZE: "20",
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      BOOTSTRAP_ORG_SLUG: OWNER.org,
      BOOTSTRAP_OWNER_EMAIL: OWNER.email,
      BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
      // Only the sweeps this benchmark asks for.
      HEARTBEAT_SWEEP_SECONDS: "86400",
    },
  });
  const heartbeats = createClient(HeartbeatsService, running.transport);
  process.on("message", async (message: string) => {
    if (message === "sweep") {
      const started = performance.now();
      const cpuBefore = cpuMs();
      const result = await heartbeats.sweep({});
      const ms = performance.now() - started;
      const cpu = cpuMs() - cpuBefore;
      const figures: SweepFigures = {
        ms,
        cpu,
        detectMs: result.detectMilliseconds,
        deliverMs: result.deliverMilliseconds,
        silent: result.silent,
        opened: result.opened,
        delivered: result.delivered,
        failed: result.failed,
      };
      process.send!({ sweep: figures });
    } else if (message === "cpu") {
      process.send!({ cpuMs: cpuMs() });
    } else if (message === "stop") {
      await running.stop();
      process.exit(0);
    }
  });
  process.send!({ url: running.url });
}

/** A floor's bare HTTP server: it answers the parent's "cpu" question and announces its url. */
function serveFloor(handle: http.RequestListener): void {
  const server = http.createServer(handle);
  server.keepAliveTimeout = 60_000;
  process.on("message", (message: string) => {
    if (message === "cpu") process.send!({ cpuMs: cpuMs() });
  });
  server.listen(0, "127.0.0.1", () => process.send!({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}` }));
}

function answer(res: http.ServerResponse, status: number): void {
  res.writeHead(status);
  res.end();
}

function cpuMs(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
}

function askChild<T>(child: ChildProcess, message: string, pick: (m: ChildMessage) => T | undefined): Promise<T> {
  return new Promise((resolve) => {
    const onMessage = (m: ChildMessage) => {
      const value = pick(m);
      if (value === undefined) return;
      child.off("message", onMessage);
      resolve(value);
    };
    child.on("message", onMessage);
    child.send(message);
  });
}

/** `CONNECTIONS` keep-alive connections, each sending requests back to back; counts answers in the window. */
/** `load` plus the server's CPU time per answered request over the whole run (warm-up included). */
async function loadServer(
  child: ChildProcess,
  url: string,
  request: (i: number) => { path: string; headers: Record<string, string> },
  expectStatus: number,
  admin?: postgres.Sql,
) {
  const pickCpu = (m: ChildMessage) => ("cpuMs" in m ? m.cpuMs : undefined);
  const before = await askChild(child, "cpu", pickCpu);
  const pgBefore = admin ? await postgresCpuMs(admin) : undefined;
  if (admin) await admin`select pg_stat_statements_reset()`;
  const loadBefore = cpuMs();
  const result = await load(url, request, expectStatus);
  const loadCpu = cpuMs() - loadBefore;
  const after = await askChild(child, "cpu", pickCpu);
  const statements = admin ? await topStatements(admin) : [];
  const pgAfter = admin ? await postgresCpuMs(admin) : undefined;
  return {
    ...result,
    serverCpuMsPerRequest: (after - before) / result.total,
    /** This process's CPU per request: the load generator shares the machine's cores. */
    loadCpuMsPerRequest: loadCpu / result.total,
    postgresCpuMsPerRequest: pgBefore && pgAfter ? cpuDelta(pgBefore, pgAfter) / result.total : undefined,
    statements,
  };
}

interface StatementRow {
  query: string;
  calls: number;
  total: number;
  rows: number;
}

async function topStatements(admin: postgres.Sql): Promise<StatementRow[]> {
  return admin<StatementRow[]>`
    select query, calls::int as calls, total_exec_time as total, rows::int as rows from pg_stat_statements
    where query not like '%pg_stat%' order by total_exec_time desc limit 5`;
}

function statementTable(rows: StatementRow[], requests: number) {
  return rows.map((r) => ({
    statement: r.query.replace(/\s+/g, " ").slice(0, 80),
    calls: r.calls,
    "calls per request": (r.calls / requests).toFixed(3),
    "rows per call": (r.rows / Math.max(1, r.calls)).toFixed(1),
    "mean ms per call": (r.total / Math.max(1, r.calls)).toFixed(3),
    "Postgres ms per request": (r.total / requests).toFixed(4),
  }));
}

async function load(
  url: string,
  request: (i: number) => { path: string; headers: Record<string, string> },
  expectStatus: number,
): Promise<{ perSecond: number; unexpected: number; total: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const target = new URL(url);
  let counting = false;
  let stop = false;
  let done = 0;
  let total = 0;
  let unexpected = 0;
  let sequence = 0;
  const one = (): Promise<number> =>
    new Promise((resolve, reject) => {
      const { path, headers } = request(sequence++);
      const req = http.request({ host: target.hostname, port: target.port, path, method: "POST", agent, headers }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      });
      req.on("error", reject);
      req.end();
    });
  const workers = Array.from({ length: CONNECTIONS }, async () => {
    while (!stop) {
      const status = await one();
      total++;
      if (!counting) continue;
      done++;
      if (status !== expectStatus) unexpected++;
    }
  });
  await new Promise((resolve) => setTimeout(resolve, WARMUP_MS));
  counting = true;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, MEASURE_MS));
  counting = false;
  const seconds = (performance.now() - started) / 1000;
  const counted = done;
  stop = true;
  await Promise.all(workers);
  agent.destroy();
  return { perSecond: Math.round(counted / seconds), unexpected, total };
}

/**
 * Registers `count` heartbeats named `<prefix><n>`, of which `overdue` are past their deadline.
 * Mixed: every other one follows a cron schedule (several expressions and time zones).
 */
async function fillRegistered(sql: postgres.Sql, orgId: string, prefix: string, count: number, overdue: number, mixed: boolean): Promise<void> {
  const schedules = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "@daily", "15 */6 * * 1-5"];
  const zones = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"];
  await sql`
    insert into heartbeats.heartbeats (org_id, org_slug, name, expected_interval_seconds, grace_seconds, schedule, timezone, schedule_gap_seconds,
      created_at, last_seen_at, deadline)
    select ${orgId}, ${OWNER.org}, ${prefix}::text || g,
           case when ${mixed}::boolean and g % 2 = 1 then null else 300 end, 60,
           case when ${mixed}::boolean and g % 2 = 1 then (${schedules}::text[])[1 + g % ${schedules.length}] end,
           case when ${mixed}::boolean and g % 2 = 1 then (${zones}::text[])[1 + g % ${zones.length}] end,
           case when ${mixed}::boolean and g % 2 = 1 then 90000 end,
           now() - interval '2 hours',
           now() - case when g < ${overdue} then interval '1 hour' else interval '10 seconds' end,
           now() - case when g < ${overdue} then interval '1 hour' else interval '10 seconds' end + interval '360 seconds'
    from generate_series(0, ${count - 1}) g`;
  await sql`vacuum analyze heartbeats.heartbeats`;
}

/** The floor of a sweep: `n` incidents and their entries inserted by two bare set statements. */
async function sweepFloor(sql: postgres.Sql, n: number): Promise<number> {
  await sql`create table bench_sweep_incidents (id uuid primary key default gen_random_uuid(), identity text unique, title text, opened_at timestamptz)`;
  await sql`create table bench_sweep_entries (id bigserial primary key, incident_id uuid, summary text, at timestamptz)`;
  const started = performance.now();
  await sql`insert into bench_sweep_incidents (identity, title, opened_at) select 'heartbeat:x-' || g, 'Heartbeat x-' || g || ' silent for 1h', now() from generate_series(1, ${n}) g`;
  await sql`insert into bench_sweep_entries (incident_id, summary, at) select id, title, now() from bench_sweep_incidents`;
  const ms = performance.now() - started;
  await sql`drop table bench_sweep_incidents, bench_sweep_entries`;
  return ms;
}

/** Bare Postgres: single-row UPDATEs by primary key at the same concurrency. */
async function bareUpdates(
  databaseUrl: string,
  admin: postgres.Sql,
): Promise<{ perSecond: number; postgresCpuMsPerRequest: number; loadCpuMsPerRequest: number }> {
  const sql = postgres(databaseUrl, { max: CONNECTIONS, onnotice: () => {} });
  await sql`create table bench_floor (id int primary key, touched_at timestamptz)`;
  await sql`insert into bench_floor select g, now() from generate_series(1, ${PING_HEARTBEATS}) g`;
  let counting = false;
  let stop = false;
  let done = 0;
  let sequence = 0;
  let total = 0;
  // Every connection open before the CPU is first read.
  await Promise.all(Array.from({ length: CONNECTIONS }, () => sql`select pg_sleep(0.05)`));
  const cpuBefore = await postgresCpuMs(admin);
  const clientBefore = cpuMs();
  const workers = Array.from({ length: CONNECTIONS }, async () => {
    while (!stop) {
      total++;
      await sql`update bench_floor set touched_at = now() where id = ${(sequence++ % PING_HEARTBEATS) + 1}`;
      if (counting) done++;
    }
  });
  await new Promise((resolve) => setTimeout(resolve, WARMUP_MS));
  counting = true;
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, MEASURE_MS));
  counting = false;
  const seconds = (performance.now() - started) / 1000;
  const counted = done;
  stop = true;
  await Promise.all(workers);
  const loadCpuMsPerRequest = (cpuMs() - clientBefore) / total;
  const cpuAfter = await postgresCpuMs(admin);
  await sql`drop table bench_floor`;
  await sql.end();
  return { perSecond: Math.round(counted / seconds), postgresCpuMsPerRequest: cpuDelta(cpuBefore, cpuAfter) / total, loadCpuMsPerRequest };
}

function sweepRow(label: string, f: SweepFigures): Record<string, string | number> {
  return {
    sweep: label,
    "total (ms)": Math.round(f.ms),
    "detect (ms)": f.detectMs,
    "hand to incident core (ms)": f.deliverMs,
    "process CPU (ms)": Math.round(f.cpu),
    silent: f.silent,
    opened: f.opened,
    failed: f.failed,
  };
}

export async function benchHeartbeats(): Promise<void> {
  // A private Postgres server: the 50-connection floors need connections a shared server may not
  // have to spare, and figures are not disturbed by other databases' work.
  const pingsOnly = process.argv.includes("--pings-only");
  const server = await startPrivatePostgres({ settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "top" } });
  const database = { url: server.url, drop: () => server.cleanup() };
  // `--cpu-prof`: a CPU profile of the service process, written to the current directory.
  const profiled = process.argv.includes("--cpu-prof") ? ["--cpu-prof"] : [];
  const { child, url } = await startChild(fileURLToPath(import.meta.url), ["--serve", database.url], { nodeOptions: profiled });
  const sql = postgres(database.url, { max: 2, onnotice: () => {} });
  const admin = postgres(database.url, { max: 1, onnotice: () => {} });
  try {
    await admin`create extension if not exists pg_stat_statements`;
    const login = await callApi(url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
    const issued = await callApi(url, "POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: login.body.accessToken });
    const ingestToken = issued.body.token as string;
    const [org] = await sql<{ id: string }[]>`select id from identity.organizations where slug = ${OWNER.org}`;
    const orgId = org!.id;

    // Pings: many heartbeats, as many jobs would send them.
    await sql`
      insert into heartbeats.heartbeats (org_id, org_slug, name, expected_interval_seconds, grace_seconds, deadline)
      select ${orgId}, ${OWNER.org}, 'ping-' || g, 3600, 600, now() + interval '70 minutes' from generate_series(0, ${PING_HEARTBEATS - 1}) g`;
    await sql`analyze heartbeats.heartbeats`;
    const pingRequest = (i: number) => ({
      path: `/o/${OWNER.org}/heartbeats/ping-${i % PING_HEARTBEATS}/ping`,
      headers: { authorization: `Bearer ${ingestToken}` },
    });
    const pings = await loadServer(child, url, pingRequest, 204, admin);
    const rejected = await loadServer(
      child,
      url,
      (i) => ({ path: `/o/${OWNER.org}/heartbeats/unknown-${i % PING_HEARTBEATS}/ping`, headers: { authorization: `Bearer ${ingestToken}` } }),
      404,
      admin,
    );
    // The same heartbeats pinged on their own ping URLs (Healthchecks' form, the key in the path, no
    // header): keys given as registration gives them, stored as their hash.
    const keys = Array.from({ length: PING_HEARTBEATS }, () => randomUUID());
    await sql`
      update heartbeats.heartbeats h set ping_key_hash = k.hash
      from unnest(${keys.map((_, n) => `ping-${n}`)}::text[], ${keys.map(hashPingKey)}::text[]) as k(name, hash)
      where h.org_id = ${orgId} and h.name = k.name`;
    const keyPings = await loadServer(child, url, (i) => ({ path: `/ping/${keys[i % PING_HEARTBEATS]}`, headers: {} }), 200, admin);
    const keyRejected = await loadServer(child, url, () => ({ path: `/ping/${randomUUID()}`, headers: {} }), 404, admin);

    const bare = await startChild(fileURLToPath(import.meta.url), ["--bare-http"]);
    const bareHttp = await loadServer(bare.child, bare.url, () => ({ path: "/", headers: {} }), 204);
    bare.child.kill();
    const httpUpdate = await startChild(fileURLToPath(import.meta.url), ["--http-update", database.url]);
    const httpFloor = await loadServer(httpUpdate.child, httpUpdate.url, (i) => ({ path: `/${(i % PING_HEARTBEATS) + 1}`, headers: {} }), 204, admin);
    httpUpdate.child.kill();
    const floorSql = await bareUpdates(database.url, admin);
    const bareSql = floorSql.perSecond;

    const cpu = (r: { serverCpuMsPerRequest: number }) => r.serverCpuMsPerRequest.toFixed(3);
    const pgCpu = (r: { postgresCpuMsPerRequest: number | undefined }) => r.postgresCpuMsPerRequest?.toFixed(3) ?? "-";
    const row = (what: string, r: Awaited<ReturnType<typeof loadServer>>) => ({
      what,
      "requests/s": r.perSecond,
      "server CPU ms/request": cpu(r),
      "Postgres CPU ms/request": pgCpu(r),
      "load generator CPU ms/request": r.loadCpuMsPerRequest.toFixed(3),
      "unexpected answers": r.unexpected,
    });
    printTable(`Pings at ${CONNECTIONS} concurrent connections (${MEASURE_MS / 1000} s after ${WARMUP_MS / 1000} s warm-up), ${PING_HEARTBEATS} heartbeats`, [
      row("ping, accepted (204)", pings),
      row("ping, refused (404, unknown name)", rejected),
      row("ping URL with the key in the path, accepted (200 OK)", keyPings),
      row("ping URL with the key in the path, refused (404, unknown key)", keyRejected),
      row("floor: bare HTTP server answering 204", bareHttp),
      row("floor: bare HTTP server doing the single-row UPDATE, 204", httpFloor),
      {
        what: "floor: bare Postgres single-row UPDATE",
        "requests/s": bareSql,
        "server CPU ms/request": "-",
        "Postgres CPU ms/request": pgCpu(floorSql),
        "load generator CPU ms/request": floorSql.loadCpuMsPerRequest.toFixed(3),
        "unexpected answers": 0,
      },
    ]);
    printTable("Postgres statements during the accepted pings (pg_stat_statements)", statementTable(pings.statements, pings.total));
    const pingRatio = pings.perSecond / bareSql;
    // What the target asks of the machine: at 0.7 of the bare UPDATE's rate, the CPU time the cores
    // have for one ping, beside what the HTTP floor (the UPDATE behind a bare HTTP server) spends.
    const cores = availableParallelism();
    const budget = (cores * 1000) / (0.7 * bareSql);
    const total = (r: Awaited<ReturnType<typeof loadServer>>) => r.serverCpuMsPerRequest + (r.postgresCpuMsPerRequest ?? 0) + r.loadCpuMsPerRequest;
    const pingSummary = [
      `Pings: ours ${pings.perSecond}/s, floor (bare UPDATE) ${bareSql}/s, ratio ${pingRatio.toFixed(2)} (target >= 0.7: ${pingRatio >= 0.7 ? "met" : "NOT met"})`,
      `  the UPDATE behind a bare HTTP server: ${httpFloor.perSecond}/s, ${(httpFloor.perSecond / bareSql).toFixed(2)} of the bare UPDATE; ours is ${(pings.perSecond / httpFloor.perSecond).toFixed(2)} of it`,
      `  CPU a ping may cost at 0.7 of the bare UPDATE on ${cores} cores: ${budget.toFixed(3)} ms (service, Postgres and load generator together); ` +
        `the HTTP floor spends ${total(httpFloor).toFixed(3)} ms, ours ${total(pings).toFixed(3)} ms`,
    ].join("\n");
    if (pingsOnly) {
      console.log(`\n${pingSummary}`);
      return;
    }

    // Sweeps: 100,000 registered; 1,000 and 10,000 overdue on intervals; 1,000 overdue of a mix
    // of intervals and cron schedules in several time zones.
    const pick = (m: ChildMessage) => ("sweep" in m ? m.sweep : undefined);
    const scenarios: { label: string; overdue: number; mixed: boolean; targetMs: number }[] = [
      { label: `${OVERDUE} overdue, intervals`, overdue: OVERDUE, mixed: false, targetMs: 1000 },
      { label: `${OVERDUE * 10} overdue, intervals`, overdue: OVERDUE * 10, mixed: false, targetMs: 5000 },
      { label: `${OVERDUE} overdue, mixed schedules`, overdue: OVERDUE, mixed: true, targetMs: 1000 },
    ];
    const rows: Record<string, string | number>[] = [];
    let plan: { "QUERY PLAN": string }[] = [];
    let allMet = true;
    for (const [n, scenario] of scenarios.entries()) {
      const prefix = `job${n}-`;
      await fillRegistered(sql, orgId, prefix, REGISTERED - PING_HEARTBEATS, scenario.overdue, scenario.mixed);
      if (n === 0) {
        plan = await sql<{ "QUERY PLAN": string }[]>`
          explain analyze select id from heartbeats.heartbeats where open_silence_id is null and deadline < now() order by deadline limit 1000`;
      }
      const first = await askChild(child, "sweep", pick);
      const second = await askChild(child, "sweep", pick);
      const floor = await sweepFloor(sql, scenario.overdue);
      const met = first.ms < scenario.targetMs && first.opened === scenario.overdue;
      allMet &&= met;
      rows.push({
        ...sweepRow(scenario.label, first),
        "second (ms)": Math.round(second.ms),
        "floor (ms)": Math.round(floor),
        "floor / ours": (floor / first.ms).toFixed(2),
        target: `< ${scenario.targetMs} ms: ${met ? "met" : "NOT met"}`,
      });
      await sql`delete from heartbeats.heartbeats where name like ${`${prefix}%`}`;
    }
    printTable(
      `One sweep with ${REGISTERED} registered heartbeats (each overdue one opens an incident through the incident core); floor: as many incidents and entries inserted by two bare statements`,
      rows,
    );
    console.log(`\nOverdue lookup plan:\n${plan.map((r) => `  ${r["QUERY PLAN"]}`).join("\n")}`);
    console.log(`\n${pingSummary}\nSweeps: ${allMet ? "all met" : "NOT all met"}`);
  } finally {
    await admin.end();
    await sql.end();
    await stopChild(child);
    await database.drop();
  }
}

if (process.argv[2] === "--serve" || process.argv[2] === "--bare-http" || process.argv[2] === "--http-update") {
  await serveChild();
} else if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  await benchHeartbeats();
  process.exit(0);
}
