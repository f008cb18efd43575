import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_PARAMS } from "../../services/identity/passwords.js";
import { callApi, OWNER } from "../support/app.js";
import { embeddedEnv, startServiceProcess, tempDataDir, waitFor, type ServiceProcess } from "../support/service-process.js";

/**
 * The default mode (`npm start`: one process, embedded Postgres) under a realistic mix of every
 * kind of route from several concurrent clients for SOAK_SECONDS (at least 60). It checks what
 * must hold however busy the machine is: every request answered (a 5xx or no answer is an error),
 * every acknowledged delivery in the database exactly once, and the process still answering and
 * stopping cleanly at the end. The latencies are printed, beside the same run's cheapest route as
 * a floor, and decide nothing: on a shared machine they measure the neighbours (a login's p99 was
 * 7 s under a full suite on two cores); `npm run bench` measures them.
 */
const SOAK_SECONDS = Math.max(60, Number(process.env.SOAK_SECONDS ?? 60));
const CLIENTS = 6;
/**
 * A client starts one request at most every PACE_MS: a busy team's steady load (up to 60/s from
 * six clients), not a saturation test. Clients that never paused took whatever the machine had
 * (112 s of CPU in 81 s alone, a quarter of two cores for 100 s in the full suite), which measured
 * nothing more: `npm run bench` saturates, against a floor.
 */
const PACE_MS = 100;
const ENTITIES = Array.from({ length: 12 }, (_, i) => `svc-${i}`);
const data = tempDataDir("wr-soak-");
let service: ServiceProcess | undefined;
afterAll(async () => {
  if (service && service.child.exitCode === null) {
    service.child.kill("SIGKILL");
    await service.exited;
  }
  data.cleanup();
});

interface Sample {
  route: string;
  status: number;
  ms: number;
}

function trigger(entity: string, transition: "Triggered" | "Recovered" = "Triggered") {
  const eventId = String(BigInt(`0x${randomUUID().replace(/-/g, "").slice(0, 15)}`));
  return {
    eventId,
    body: {
      title: `[${transition}] Errors on ${entity}`,
      alert_type: transition === "Triggered" ? "error" : "success",
      alert_transition: transition,
      alert_id: `soak-${entity}`,
      event_id: eventId,
      priority: "P2",
      tags: [`service:${entity}`, "env:prod"],
      body: "error rate above 5% for 5 minutes",
      link: `https://monitoring.example.com/monitors/${entity}`,
    },
  };
}

const pick = <T>(items: T[]): T => items[Math.floor(Math.random() * items.length)]!;

describe("soak: the default mode under a realistic mix of every route", () => {
  it(`answers every request for ${SOAK_SECONDS} s with ${CLIENTS} clients and loses or doubles no acknowledged delivery`, async () => {
    // As `npm start` runs it: the source through tsx, hashing passwords at the default cost.
    service = startServiceProcess(
      embeddedEnv(data.dir, { LOG_LEVEL: "info", SHUTDOWN_GRACE_SECONDS: "5", METRICS_PORT: "0", PASSWORD_SCRYPT_N: String(DEFAULT_PARAMS.N) }),
      undefined,
      undefined,
      {
        tsx: true,
      },
    );
    const { url, metricsUrl } = await service.serving;
    await waitFor(`${url}/readyz`);
    const samples: Sample[] = [];
    const failures: string[] = [];
    const refusals = new Map<string, string>();
    const call = async (route: string, method: string, path: string, options: Parameters<typeof callApi>[3] = {}, base = url) => {
      const started = performance.now();
      try {
        const res = await callApi(base, method, path, options);
        samples.push({ route, status: res.status, ms: performance.now() - started });
        if (res.status >= 500) failures.push(`${route}: ${res.status} ${JSON.stringify(res.body)}`);
        else if (res.status >= 400) refusals.set(`${route} ${res.status}`, JSON.stringify(res.body));
        return res;
      } catch (err) {
        samples.push({ route, status: 0, ms: performance.now() - started });
        failures.push(`${route}: ${(err as Error).message}`);
        return { status: 0, body: null, headers: new Headers() };
      }
    };

    const owner = (await call("login", "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } })).body
      .accessToken as string;
    const ingest = (await call("issue ingest token", "POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
    expect(owner && ingest).toBeTruthy();
    // Deliveries a maintenance window covers are suppressed: the audit of a suppression goes
    // through an outbox, one of the paths that froze the single-connection embedded database.
    await call("create maintenance window", "POST", "/o/acme/maintenance-windows", {
      token: owner,
      body: {
        startsAt: new Date(Date.now() - 60_000).toISOString(),
        endsAt: new Date(Date.now() + 3_600_000).toISOString(),
        reason: "soak",
        match: { entities: [{ kind: "service", id: "svc-maintenance" }] },
      },
    });

    const acknowledged: Array<{ incidentId: string; eventId: string }> = [];
    const heartbeats: string[] = [];
    const incidents: string[] = [];
    const windows: string[] = [];
    let members = 0;

    const actions: Array<[number, () => Promise<unknown>]> = [
      [
        30,
        async () => {
          const { eventId, body } = trigger(pick(ENTITIES));
          const res = await call("POST /triggers", "POST", "/triggers", { token: ingest, body });
          if ((res.status === 201 || res.status === 200) && (res.body.outcome === "opened" || res.body.outcome === "attached")) {
            acknowledged.push({ incidentId: res.body.incidentId, eventId });
            if (res.body.outcome === "opened") incidents.push(res.body.incidentId);
          }
        },
      ],
      [4, () => call("POST /triggers (recovery)", "POST", "/triggers", { token: ingest, body: trigger(pick(ENTITIES), "Recovered").body })],
      [4, () => call("POST /triggers (suppressed)", "POST", "/triggers", { token: ingest, body: trigger("svc-maintenance").body })],
      [8, () => call("GET incidents", "GET", "/o/acme/incidents?state=open", { token: owner })],
      [6, async () => incidents.length > 0 && call("GET incident", "GET", `/o/acme/incidents/${pick(incidents)}`, { token: owner })],
      [3, async () => incidents.length > 0 && call("resolve incident", "POST", `/o/acme/incidents/${pick(incidents)}/resolve`, { token: owner, body: {} })],
      [1, async () => incidents.length > 0 && call("archive incident", "POST", `/o/acme/incidents/${pick(incidents)}/archive`, { token: owner, body: {} })],
      [
        4,
        async () => {
          const name = `job-${randomUUID().slice(0, 8)}`;
          const res = await call("register heartbeat", "POST", "/o/acme/heartbeats", {
            token: owner,
            body: { name, expectedIntervalSeconds: 3600, graceSeconds: 600 },
          });
          if (res.status === 201) heartbeats.push(name);
        },
      ],
      [10, async () => heartbeats.length > 0 && call("ping heartbeat", "POST", `/o/acme/heartbeats/${pick(heartbeats)}/ping`, { token: ingest })],
      [3, () => call("GET heartbeats", "GET", "/o/acme/heartbeats", { token: owner })],
      [1, async () => heartbeats.length > 3 && call("delete heartbeat", "DELETE", `/o/acme/heartbeats/${heartbeats.shift()}`, { token: owner })],
      [
        3,
        async () => {
          const res = await call("create maintenance window", "POST", "/o/acme/maintenance-windows", {
            token: owner,
            body: {
              startsAt: new Date(Date.now() + 86_400_000).toISOString(),
              endsAt: new Date(Date.now() + 90_000_000).toISOString(),
              reason: "later",
              match: { sources: ["error-tracker"] },
            },
          });
          if (res.status === 201 && res.body.id) windows.push(res.body.id);
        },
      ],
      [2, () => call("GET maintenance windows", "GET", "/o/acme/maintenance-windows", { token: owner })],
      [1, async () => windows.length > 0 && call("delete maintenance window", "DELETE", `/o/acme/maintenance-windows/${windows.shift()}`, { token: owner })],
      [
        3,
        async () => {
          const res = await call("create API key", "POST", "/o/acme/api-keys", { token: owner, body: { name: "soak" } });
          if (res.status === 201) {
            await call("GET incidents by API key", "GET", "/o/acme/incidents", { token: res.body.key });
            await call("delete API key", "DELETE", `/o/acme/api-keys/${res.body.id}`, { token: owner });
          }
        },
      ],
      [2, () => call("GET audit events", "GET", "/o/acme/audit-events", { token: owner })],
      [2, () => call("GET members", "GET", "/o/acme/members", { token: owner })],
      // Adding a member and logging in hash a password at the default cost, half a second of a
      // core each: at 3 % of the requests they were half the soak's CPU. A person logs in far less
      // often than alerts arrive.
      [
        0.25,
        () =>
          call("add member", "POST", "/o/acme/members", {
            token: owner,
            body: { email: `m${members++}-${randomUUID().slice(0, 6)}@acme.test`, password: "password-123", role: "member" },
          }),
      ],
      [
        2,
        () =>
          call("create remote source", "POST", "/o/acme/remote-sources", {
            token: owner,
            body: {
              name: `rs-${randomUUID().slice(0, 8)}`,
              baseUrl: "https://metrics.example.com/api",
              transport: "http",
              auth: { bearerToken: "soak-token" },
              tenantRef: "acme",
            },
          }),
      ],
      [2, () => call("GET remote sources", "GET", "/o/acme/remote-sources", { token: owner })],
      [2, () => call("GET chat webhook", "GET", "/o/acme/integrations/chatwebhook/connections/default", { token: owner })],
      [0.5, () => call("login", "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } })],
      [2, () => call("GET /readyz", "GET", "/readyz")],
      // Metrics are on METRICS_PORT, never on the public port.
      [1, () => call("GET /metrics", "GET", "/metrics", {}, metricsUrl!.replace(/\/metrics$/, ""))],
    ];
    const total = actions.reduce((sum, [w]) => sum + w, 0);
    const choose = () => {
      let r = Math.random() * total;
      for (const [w, action] of actions) {
        r -= w;
        if (r < 0) return action;
      }
      return actions[0]![1];
    };

    const until = Date.now() + SOAK_SECONDS * 1000;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (Date.now() < until) {
          const next = Date.now() + PACE_MS;
          await choose()();
          await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
        }
      }),
    );

    // Still answering, every kind of route, after the load.
    const after: Array<[string, string, string, Parameters<typeof callApi>[3]?]> = [
      ["GET", "/healthz", "healthz"],
      ["GET", "/readyz", "readyz"],
      ["POST", "/auth/login", "login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } }],
      ["POST", "/triggers", "trigger", { token: ingest, body: trigger("svc-after").body }],
      ["GET", "/o/acme/incidents", "incidents", { token: owner }],
    ];
    for (const [method, path, name, options] of after) {
      const res = await callApi(url, method, path, options);
      expect(res.status, `${name}: ${JSON.stringify(res.body)}`).toBeLessThan(300);
    }

    // Every acknowledged delivery is in the database.
    const port = Number(/"port":(\d+),"ms":\d+,"msg":"embedded Postgres started"/.exec(service.output())![1]);
    const password = readFileSync(join(data.dir, "pg-password"), "utf8").trim();
    const sql = postgres({ host: "127.0.0.1", port, database: "postgres", username: "postgres", password, max: 1, onnotice: () => {} });
    let missing: Array<{ incidentId: string; eventId: string }>;
    let doubled: string[];
    try {
      const held = await sql<{ incident_id: string; event_id: string }[]>`
        select incident_id::text, event_id from incidents.timeline_entries where event_id is not null`;
      const stored = new Map<string, number>();
      for (const r of held) stored.set(`${r.incident_id}/${r.event_id}`, (stored.get(`${r.incident_id}/${r.event_id}`) ?? 0) + 1);
      missing = acknowledged.filter((a) => !stored.has(`${a.incidentId}/${a.eventId}`));
      doubled = [...stored].filter(([, n]) => n > 1).map(([key, n]) => `${key} x${n}`);
    } finally {
      await sql.end();
    }

    const sorted = samples.map((s) => s.ms).sort((a, b) => a - b);
    const quantile = (values: number[], q: number) => Math.round(values[Math.min(values.length - 1, Math.floor(q * values.length))]!);
    const p = (q: number) => quantile(sorted, q);
    // Hashing a password is slow on purpose (scrypt, two at a time): a login, and adding a member
    // with a password, wait in the same queue. They have a budget of their own and do not set the
    // budget of everything else (adding a member is about 1 % of the requests, so it decided the
    // p99 of the rest in some runs: 1.9 s where every other route's p99 was under 0.1 s).
    const hashesPassword = (route: string) => route === "login" || route === "add member";
    const loginTimes = samples
      .filter((s) => hashesPassword(s.route))
      .map((s) => s.ms)
      .sort((a, b) => a - b);
    const otherTimes = samples
      .filter((s) => !hashesPassword(s.route))
      .map((s) => s.ms)
      .sort((a, b) => a - b);
    const byRoute = new Map<string, { n: number; statuses: Record<number, number>; times: number[] }>();
    for (const s of samples) {
      const entry = byRoute.get(s.route) ?? { n: 0, statuses: {}, times: [] };
      entry.n++;
      entry.statuses[s.status] = (entry.statuses[s.status] ?? 0) + 1;
      entry.times.push(s.ms);
      byRoute.set(s.route, entry);
    }
    console.log(
      [
        `soak: ${SOAK_SECONDS} s, ${CLIENTS} clients, ${samples.length} requests (${Math.round(samples.length / SOAK_SECONDS)}/s), ` +
          `${failures.length} errors (5xx or no answer), p50 ${p(0.5)} ms, p99 ${p(0.99)} ms, max ${Math.round(sorted.at(-1)!)} ms ` +
          `(p99 without password hashing ${quantile(otherTimes, 0.99)} ms, of logins and members added ${quantile(loginTimes, 0.99)} ms); ` +
          `${acknowledged.length} acknowledged deliveries, ${missing.length} missing from the database, ${doubled.length} recorded twice; ` +
          `floor, same run: GET /readyz p50 ${quantile(
            (byRoute.get("GET /readyz")?.times ?? [0]).slice().sort((a, b) => a - b),
            0.5,
          )} ms, p99 ${quantile(
            (byRoute.get("GET /readyz")?.times ?? [0]).slice().sort((a, b) => a - b),
            0.99,
          )} ms`,
        ...[...byRoute].map(
          ([route, { n, statuses, times }]) =>
            `  ${route}: ${n} ${JSON.stringify(statuses)}, p99 ${quantile(
              times.sort((a, b) => a - b),
              0.99,
            )} ms, max ${Math.round(times.at(-1)!)} ms`,
        ),
        ...[...refusals].map(([what, body]) => `  refused: ${what} ${body}`),
        ...failures.slice(0, 10).map((f) => `  error: ${f}`),
      ].join("\n"),
    );
    expect(failures).toEqual([]);
    expect(missing).toEqual([]);
    expect(doubled).toEqual([]);
    // How many depends on the machine's speed (1,074 on two idle cores): the soak must have
    // delivered some for the two checks above to mean anything.
    expect(acknowledged.length).toBeGreaterThan(0);

    // A hang detector, not a budget: the drain takes at most SHUTDOWN_GRACE_SECONDS (5 s) and the
    // embedded Postgres's stop a second more; 60 s means the process never stops.
    const stopped = performance.now();
    service.child.kill("SIGTERM");
    const { code } = await service.exited;
    expect(code).toBe(0);
    expect(performance.now() - stopped).toBeLessThan(60_000);
  });
});
