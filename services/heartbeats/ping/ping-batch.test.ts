import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { castOf, type Cast } from "../testing/kit.js";

// Concurrent pings are written together, a batch per statement. Over HTTP, many pings at once to
// several heartbeats: each heartbeat counts every ping once, keeps its history in the order each
// job sent it, and pairs every start with its end by run id, exactly as one ping at a time would.

let app: TestApp;
let cast: Cast;

beforeAll(async () => {
  app = await startApp({ env: { HEARTBEAT_SWEEP_SECONDS: "3600" } });
  cast = await castOf(app);
});

afterAll(async () => {
  await app?.stop();
});

const HEARTBEATS = 5;
/** Jobs per heartbeat that run one after another, each with run ids of its own. */
const CHAINS = 2;
const RUNS_PER_CHAIN = 8;
/** Plain pings per heartbeat, all sent at once. */
const BURST = 20;

interface HistoryEntry {
  at: string;
  kind: string;
  runId: string | null;
  runSeconds: number | null;
  bodyBytes: number;
}

function signal(name: string, what: string, options: { runId?: string; body?: string; token?: string } = {}) {
  const query = options.runId ? `?run_id=${options.runId}` : "";
  const path = what ? `/o/acme/heartbeats/${name}/ping/${what}${query}` : `/o/acme/heartbeats/${name}/ping${query}`;
  return app.call("POST", path, { token: options.token ?? cast.ingestToken, raw: options.body ?? "", headers: { "content-type": "text/plain" } });
}

describe("concurrent pings", () => {
  it("count every ping once, keep each job's order and pair its runs, across several heartbeats", async () => {
    const names = Array.from({ length: HEARTBEATS }, (_, i) => `batched-${i}`);
    for (const name of names) {
      const res = await app.call("POST", "/o/acme/heartbeats", { token: cast.admin, body: { name, expectedIntervalSeconds: 3600, graceSeconds: 60 } });
      expect(res.status).toBe(201);
    }
    const runIds = new Map(names.map((name) => [name, Array.from({ length: CHAINS }, () => Array.from({ length: RUNS_PER_CHAIN }, () => randomUUID()))]));
    const statuses: number[] = [];
    // A job: start, then end with a body whose size says which run it was, one run after another.
    const chain = async (name: string, c: number) => {
      for (const [r, runId] of runIds.get(name)![c]!.entries()) {
        statuses.push((await signal(name, "start", { runId })).status);
        statuses.push((await signal(name, "0", { runId, body: "x".repeat(c * 100 + r + 1) })).status);
      }
    };
    const burst = (name: string) => Array.from({ length: BURST }, async () => statuses.push((await signal(name, "")).status));
    // Another organization's token names the same heartbeats: refused, and not counted. Names no
    // heartbeat can have (a NUL, too long) are refused without failing the
    // pings written beside them.
    const refused = [
      ...names.map((name) => signal(name, "", { token: cast.otherIngestToken })),
      ...["bad%00name", "x".repeat(300)].map((name) => signal(name, "")),
    ];
    await Promise.all([...names.flatMap((name) => [...Array.from({ length: CHAINS }, (_, c) => chain(name, c)), ...burst(name)]), ...refused]);
    for (const res of await Promise.all(refused)) expect(res.status).toBe(404);
    expect(statuses.filter((s) => s !== 204)).toEqual([]);
    expect(statuses).toHaveLength(HEARTBEATS * (CHAINS * RUNS_PER_CHAIN * 2 + BURST));

    const timesByHeartbeat = new Map<string, Set<string>>();
    for (const name of names) {
      const res = await app.call("GET", `/o/acme/heartbeats/${name}/pings`, { token: cast.member });
      expect(res.status).toBe(200);
      const newestFirst = res.body.pings as HistoryEntry[];
      expect(newestFirst).toHaveLength(CHAINS * RUNS_PER_CHAIN * 2 + BURST);
      const history = [...newestFirst].reverse();
      const times = history.map((p) => Date.parse(p.at));
      expect(times).toEqual([...times].sort((a, b) => a - b));
      timesByHeartbeat.set(name, new Set(history.map((p) => p.at)));

      const plain = history.filter((p) => p.runId === null);
      expect(plain).toHaveLength(BURST);
      for (const p of plain) expect(p).toMatchObject({ kind: "success", runSeconds: null, bodyBytes: 0 });

      for (const [c, ids] of runIds.get(name)!.entries()) {
        const own = new Set<string>(ids);
        const jobs = history.filter((p) => p.runId !== null && own.has(p.runId));
        // start r1, end r1, start r2, end r2, ...: the order the job sent them in.
        expect(jobs.map((p) => `${p.kind} ${p.runId}`)).toEqual(ids.flatMap((id) => [`start ${id}`, `success ${id}`]));
        for (const [r, end] of jobs.filter((p) => p.kind === "success").entries()) {
          expect(end.bodyBytes).toBe(c * 100 + r + 1);
          expect(end.runSeconds).toBeGreaterThanOrEqual(0);
        }
      }

      const heartbeat = (await app.call("GET", `/o/acme/heartbeats/${name}`, { token: cast.member })).body;
      expect(heartbeat).toMatchObject({ status: "ok", runningSince: null });
      expect(heartbeat.lastSeenAt).toBe(newestFirst[0]!.at);
    }

    // Pings of different heartbeats written by one statement share its transaction's time: the
    // concurrent pings were grouped.
    const seen = new Map<string, number>();
    for (const times of timesByHeartbeat.values()) for (const at of times) seen.set(at, (seen.get(at) ?? 0) + 1);
    expect(Math.max(...seen.values())).toBeGreaterThan(1);
  });
});
