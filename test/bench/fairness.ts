import { type ChildProcess, fork } from "node:child_process";
import http from "node:http";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import type { RunningProcess } from "../../services/process/run-process.js";
import { freshDatabase } from "../support/app.js";
import { startChild, stopChild } from "./child-process.js";
import { ingestToken, startBenchApp } from "./intake.js";
import { printTable, summarize } from "./stats.js";

/**
 * Fairness and overload of the trigger endpoint, the whole app in one process on a database of its
 * own (the load generator shares the machine, as in the intake bench).
 *
 * fairness: a second organization sends 50 deliveries/s (open loop: on schedule, whatever the
 *   answers) first alone (its quiet figures, the same-run floor), then while the first
 *   organization floods at full speed over FLOOD_CONNECTIONS connections. Target: the second's
 *   p99 at most 3x quiet. The app, the flood and the second organization's sender are three
 *   processes, as they are three parties: in one, the second's answers would wait in one event
 *   loop behind the flood's own requests and answers, and its timings would measure the load
 *   generator. `BENCH_PROFILE_DIR` writes the app's CPU profile there, and the app's event-loop
 *   delay is printed beside the figures.
 * overload: the machine's capacity in the same run (CAPACITY_CONNECTIONS connections back to back),
 *   then OVERLOAD_CONNECTIONS (8x as many). Every answer is either accepted (2xx) or shed early
 *   (429/503 with Retry-After); prints accepted/s, shed/s, the p99 of the accepted, the RSS, and
 *   how many acknowledged deliveries the database lacks (lost) or holds twice (doubled).
 */
const SECONDS = Number(process.env.FAIRNESS_BENCH_SECONDS ?? 10);
const QUIET_RATE = 50;
const FLOOD_CONNECTIONS = 50;
const CAPACITY_CONNECTIONS = 50;
const OVERLOAD_CONNECTIONS = Number(process.env.OVERLOAD_CONNECTIONS ?? 400);
const FAIRNESS_TARGET = 3;

interface Sent {
  status: number;
  ms: number;
  retryAfter: string | undefined;
  body: string;
}

function post(agent: http.Agent, url: URL, token: string, body: string): Promise<Sent> {
  const started = performance.now();
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: "/triggers",
        method: "POST",
        agent,
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            ms: performance.now() - started,
            retryAfter: res.headers["retry-after"] as string | undefined,
            body: Buffer.concat(chunks).toString("utf8"),
          }),
        );
      },
    );
    req.on("error", () => resolve({ status: 0, ms: performance.now() - started, retryAfter: undefined, body: "" }));
    req.end(body);
  });
}

/** A new alert per delivery: each accepted one opens exactly one incident named by its alert id. */
function newAlert(run: string, n: number): { alertId: string; body: string } {
  const alertId = `${run}-${n}`;
  return {
    alertId,
    body: JSON.stringify({
      title: `[Triggered on {host:web-1}] ${alertId}`,
      body: "CPU above 90% for 5 minutes",
      alert_id: alertId,
      alert_transition: "Triggered",
      alert_type: "error",
      alert_priority: "P2",
      event_id: `${alertId}-e`,
      tags: ["env:prod"],
    }),
  };
}

/** `connections` posting back to back for `seconds`; every answer kept with its alert id. */
async function closedLoop(url: URL, token: string, connections: number, seconds: number, run: string) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  const answers: (Sent & { alertId: string })[] = [];
  let n = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < until) {
        const { alertId, body } = newAlert(run, n++);
        answers.push({ ...(await post(agent, url, token, body)), alertId });
      }
    }),
  );
  agent.destroy();
  return answers;
}

/** `rate` deliveries a second on schedule for `seconds`, whatever the answers. */
async function openLoop(url: URL, token: string, rate: number, seconds: number, run: string): Promise<Sent[]> {
  const agent = new http.Agent({ keepAlive: true });
  const pending: Promise<Sent>[] = [];
  const start = performance.now();
  for (let i = 0; i < rate * seconds; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    pending.push(post(agent, url, token, newAlert(run, i).body));
  }
  const answers = await Promise.all(pending);
  agent.destroy();
  return answers;
}

const ms = (v: number) => `${v.toFixed(1)} ms`;
const tally = (answers: Sent[]) => {
  const counts: Record<string, number> = {};
  for (const a of answers) counts[a.status] = (counts[a.status] ?? 0) + 1;
  return JSON.stringify(counts);
};

async function withApp<T>(work: (app: RunningProcess, databaseUrl: string) => Promise<T>): Promise<T> {
  const database = await freshDatabase();
  try {
    const app = await startBenchApp(database.url);
    try {
      return await work(app, database.url);
    } finally {
      await app.stop();
    }
  } finally {
    await database.drop();
  }
}

/** `openLoop` in a process of its own: the second organization's sender, timed apart from the flood. */
async function openLoopApart(url: URL, token: string, rate: number, seconds: number, run: string): Promise<Sent[]> {
  const child = fork(fileURLToPath(import.meta.url), [OPEN_LOOP, url.toString(), token, String(rate), String(seconds), run], {
    stdio: "inherit",
    execArgv: process.execArgv,
  });
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`the second organization's sender exited with ${code}`)));
    child.once("message", (m: { answers: Sent[] }) => resolve(m.answers));
  });
}

const OPEN_LOOP = "--open-loop";

interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
}

/** The app's event-loop delay since the last ask ("event-loop" message to intake.ts's child). */
/** The app's event-loop delay since the last ask (ms: p50, p99, max). */
export const eventLoopDelay = (child: ChildProcess) => ask<LoopDelay>(child, "event-loop", "eventLoop");

/** Sends the child `message` and resolves with the `key` of its first answer that has one. */
export function ask<T>(child: ChildProcess, message: string, key: string): Promise<T> {
  return new Promise((resolve) => {
    const onMessage = (m: Record<string, T>) => {
      if (!(key in m)) return;
      child.off("message", onMessage);
      resolve(m[key]!);
    };
    child.on("message", onMessage);
    child.send(message);
  });
}

export async function benchFairness(): Promise<void> {
  const database = await freshDatabase();
  try {
    const app = await startChild(fileURLToPath(new URL("./intake.ts", import.meta.url)), ["--serve", database.url], {
      nodeOptions: process.env.BENCH_PROFILE_DIR ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [],
    });
    try {
      const url = new URL(app.url);
      const flooding = await ingestToken(app.url);
      const quiet = await ask<string>(app.child, "second-org", "secondOrgToken");
      const run = randomBytes(3).toString("hex");
      // Warm-up, then the second organization alone: its quiet figures.
      await openLoopApart(url, quiet, QUIET_RATE, 2, `${run}-warm`);
      await eventLoopDelay(app.child);
      const alone = await openLoopApart(url, quiet, QUIET_RATE, SECONDS, `${run}-alone`);
      const loopAlone = await eventLoopDelay(app.child);
      const flood = closedLoop(url, flooding, FLOOD_CONNECTIONS, SECONDS + 2, `${run}-flood`);
      await new Promise((r) => setTimeout(r, 1000));
      await eventLoopDelay(app.child);
      const during = await openLoopApart(url, quiet, QUIET_RATE, SECONDS, `${run}-during`);
      const loopDuring = await eventLoopDelay(app.child);
      const flooded = await flood;
      const a = summarize(alone.filter((x) => x.status >= 200 && x.status < 300).map((x) => x.ms));
      const d = summarize(during.filter((x) => x.status >= 200 && x.status < 300).map((x) => x.ms));
      const floodAccepted = flooded.filter((x) => x.status >= 200 && x.status < 300).length;
      printTable(
        `Fairness: a second organization at ${QUIET_RATE}/s, alone (same-run floor) and while the first floods over ${FLOOD_CONNECTIONS} connections; target p99 <= ${FAIRNESS_TARGET}x quiet`,
        [
          { figure: "second org p50", quiet: ms(a.p50), "during flood": ms(d.p50), ratio: (d.p50 / a.p50).toFixed(2) },
          {
            figure: "second org p99",
            quiet: ms(a.p99),
            "during flood": ms(d.p99),
            ratio: (d.p99 / a.p99).toFixed(2),
            target: `<= ${FAIRNESS_TARGET}`,
            met: d.p99 <= FAIRNESS_TARGET * a.p99 ? "yes" : "no",
          },
          { figure: "second org answers", quiet: tally(alone), "during flood": tally(during) },
          {
            figure: "flooding org",
            quiet: "",
            "during flood": `${Math.round(floodAccepted / (SECONDS + 2))}/s accepted; ${tally(flooded)}`,
          },
          {
            figure: "app event-loop delay p50 / p99 / max",
            quiet: `${ms(loopAlone.p50)} / ${ms(loopAlone.p99)} / ${ms(loopAlone.max)}`,
            "during flood": `${ms(loopDuring.p50)} / ${ms(loopDuring.p99)} / ${ms(loopDuring.max)}`,
          },
        ],
      );
    } finally {
      await stopChild(app.child);
    }
  } finally {
    await database.drop();
  }
}

export async function benchOverload(): Promise<void> {
  // All the load comes from one address here: the per-address connection cap (256 by default)
  // would refuse the connections before any delivery reached the service's shares.
  process.env.HTTP_MAX_CONNECTIONS_PER_ADDRESS ??= String(OVERLOAD_CONNECTIONS * 2);
  await withApp(async (app, databaseUrl) => {
    const url = new URL(app.url);
    const token = await ingestToken(app.url);
    const run = randomBytes(3).toString("hex");
    await closedLoop(url, token, CAPACITY_CONNECTIONS, 2, `${run}-warm`);
    const capacity = await closedLoop(url, token, CAPACITY_CONNECTIONS, SECONDS, `${run}-cap`);
    const rssBefore = process.memoryUsage().rss;
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 200);
    const over = await closedLoop(url, token, OVERLOAD_CONNECTIONS, SECONDS, `${run}-over`);
    clearInterval(sampler);
    const accepted = <T extends Sent>(answers: T[]) => answers.filter((x) => x.status >= 200 && x.status < 300);
    const shed = over.filter((x) => x.status === 429 || x.status === 503);
    const shedWithoutRetryAfter = shed.filter((x) => !x.retryAfter).length;
    const other = over.length - accepted(over).length - shed.length;
    // Every acknowledged delivery opened exactly one incident; none shed opened one.
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    let lost = 0;
    let doubled = 0;
    let shedButOpened = 0;
    try {
      const titles = await sql<{ title: string }[]>`select title from incidents.incidents where title like ${`%${run}-over-%`}`;
      const opened = new Map<string, number>();
      for (const { title } of titles) {
        const alertId = title.slice(title.indexOf(`${run}-over-`));
        opened.set(alertId, (opened.get(alertId) ?? 0) + 1);
      }
      for (const x of accepted(over)) {
        const n = opened.get(x.alertId) ?? 0;
        if (n === 0) lost++;
        if (n > 1) doubled++;
      }
      for (const x of shed) if (opened.has(x.alertId)) shedButOpened++;
    } finally {
      await sql.end();
    }
    const c = summarize(accepted(capacity).map((x) => x.ms));
    const o = summarize(accepted(over).map((x) => x.ms));
    const shedMs = summarize(shed.map((x) => x.ms));
    const perSecond = (n: number) => Math.round(n / SECONDS);
    printTable(
      `Overload: ${OVERLOAD_CONNECTIONS} connections back to back against the capacity measured in the same run at ${CAPACITY_CONNECTIONS} (every delivery a new alert)`,
      [
        {
          run: `capacity (${CAPACITY_CONNECTIONS} connections)`,
          "accepted/s": perSecond(accepted(capacity).length),
          "shed/s": 0,
          "p99 accepted": ms(c.p99),
          answers: tally(capacity),
        },
        {
          run: `overload (${OVERLOAD_CONNECTIONS} connections)`,
          "accepted/s": perSecond(accepted(over).length),
          "shed/s": perSecond(shed.length),
          "p99 accepted": ms(o.p99),
          "p99 shed": ms(shedMs.p99),
          answers: tally(over),
        },
      ],
    );
    printTable("Overload: what held", [
      {
        "accepted / capacity": (accepted(over).length / Math.max(1, accepted(capacity).length)).toFixed(2),
        "RSS before": `${(rssBefore / 2 ** 20).toFixed(0)} MiB`,
        "RSS peak": `${(rssPeak / 2 ** 20).toFixed(0)} MiB`,
        lost,
        doubled,
        "shed yet opened": shedButOpened,
        "shed without Retry-After": shedWithoutRetryAfter,
        "neither accepted nor shed": other,
      },
    ]);
  });
}

if (process.argv[2] === OPEN_LOOP) {
  const [, , , url, token, rate, seconds, run] = process.argv;
  const answers = await openLoop(new URL(url!), token!, Number(rate), Number(seconds), run!);
  process.send!({ answers }, () => process.exit(0));
}
