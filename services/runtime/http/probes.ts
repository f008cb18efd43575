import type { NatsConnection } from "@nats-io/transport-node";
import type { Sql } from "../data/database.js";
import { connectionState } from "../transport/nats-transport.js";

/** What one check found: "ok", or why not. */
export type CheckResult = string;

export interface ProbeReport {
  ok: boolean;
  /** Every check by name, "ok" or the reason it fails. */
  checks: Record<string, CheckResult>;
  /** The names of the failing checks. */
  failing: string[];
}

export interface Probes {
  /** Readiness: may this process take traffic now? Answers within CHECK_BUDGET_MS whatever hangs. */
  readiness(): Promise<ProbeReport>;
  /**
   * Liveness: the process's own, never a dependency's. A hung database is the same for every
   * replica, and restarting them all at once would mend nothing; readiness follows it instead.
   * A process that answers is alive (a blocked event loop does not answer, and the probe times out).
   */
  liveness(): ProbeReport;
  markStarted(): void;
  markStopping(): void;
  close(): void;
}

/** Each dependency check gets this long; /readyz answers within about this budget. */
export const CHECK_BUDGET_MS = 1500;
/** The event loop counts as stuck in readiness once a turn took longer than this, recently. */
const EVENT_LOOP_READY_MS = 2000;
const EVENT_LOOP_WINDOW_MS = 5000;
const TICK_MS = 100;

const timedOut = Symbol("timeout");

async function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof timedOut> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof timedOut>((resolve) => {
    timer = setTimeout(() => resolve(timedOut), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function report(checks: Record<string, CheckResult>): ProbeReport {
  const failing = Object.entries(checks)
    .filter(([, v]) => v !== "ok")
    .map(([k]) => k);
  return { ok: failing.length === 0, checks, failing };
}

/**
 * The process's probes. One database ping and one JetStream ping are in flight at a time, shared
 * by every probe, so a hung dependency never piles up probe queries.
 */
export function createProbes(options: { sql: Sql; nats?: NatsConnection | undefined; extra: Array<{ name: string; ready(): Promise<boolean> }> }): Probes {
  const { sql, nats } = options;
  let started = false;
  let stopping = false;

  // Event loop: a timer that should fire every TICK_MS; the delay beyond that is the lag.
  const lags: Array<{ at: number; lag: number }> = [];
  let expected = Date.now() + TICK_MS;
  const loopTimer = setInterval(() => {
    const now = Date.now();
    const lag = Math.max(0, now - expected);
    expected = now + TICK_MS;
    if (lag > 50) lags.push({ at: now, lag });
    while (lags.length > 0 && lags[0]!.at < now - EVENT_LOOP_WINDOW_MS) lags.shift();
  }, TICK_MS);
  loopTimer.unref();

  let dbPing: { result: Promise<string> } | undefined;
  const pingDatabase = (): Promise<string> => {
    if (!dbPing) {
      const ping = {
        result: sql`select 1`.then(
          () => "ok",
          (err: Error) => `error: ${err.message}`,
        ),
      };
      dbPing = ping;
      void ping.result.finally(() => {
        if (dbPing === ping) dbPing = undefined;
      });
    }
    return dbPing.result;
  };
  let jsPing: Promise<string> | undefined;
  const pingJetStream = (): Promise<string> => {
    if (!nats) return Promise.resolve("ok");
    jsPing ??= nats
      .request("$JS.API.INFO", undefined, { timeout: CHECK_BUDGET_MS })
      .then((msg) => {
        const info = msg.json<{ error?: { description?: string } }>();
        return info.error ? `error: ${info.error.description ?? "JetStream refused"}` : "ok";
      })
      .catch((err: Error) => `error: ${err.message}`)
      .finally(() => {
        jsPing = undefined;
      });
    return jsPing;
  };

  return {
    async readiness() {
      const checks: Record<string, CheckResult> = {};
      checks.process = stopping ? "stopping" : started ? "ok" : "starting";
      const [db, js, ...extra] = await Promise.all([
        within(pingDatabase(), CHECK_BUDGET_MS),
        nats ? within(pingJetStream(), CHECK_BUDGET_MS) : Promise.resolve("ok" as const),
        ...options.extra.map((e) =>
          within(
            e.ready().catch(() => false),
            CHECK_BUDGET_MS,
          ),
        ),
      ]);
      checks.database = db === timedOut ? `no answer within ${CHECK_BUDGET_MS} ms` : db;
      if (nats) {
        checks.nats = connectionState(nats).connected() ? "ok" : "disconnected";
        checks.jetstream = js === timedOut ? `no answer within ${CHECK_BUDGET_MS} ms` : (js as string);
      }
      options.extra.forEach((e, i) => {
        const r = extra[i];
        checks[e.name] = r === true ? "ok" : r === timedOut ? `no answer within ${CHECK_BUDGET_MS} ms` : "not ready";
      });
      const worst = lags.reduce((max, l) => Math.max(max, l.lag), 0);
      checks.eventLoop = worst > EVENT_LOOP_READY_MS ? `a turn took ${worst} ms in the last ${EVENT_LOOP_WINDOW_MS / 1000} s` : "ok";
      return report(checks);
    },
    liveness() {
      return report({ process: "ok" });
    },
    markStarted() {
      started = true;
      // Start-up work (migrations, first imports) is not a stuck loop.
      lags.length = 0;
    },
    markStopping() {
      stopping = true;
    },
    close() {
      clearInterval(loopTimer);
    },
  };
}
