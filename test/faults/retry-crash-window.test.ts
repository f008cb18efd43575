import { execFile } from "node:child_process";
import { promisify } from "node:util";
import type postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Cluster } from "../../services/process/cluster.js";
import { fixture } from "../e2e/triggers-kit.js";
import { startFaultCluster, type FaultCluster } from "../support/fault-cluster.js";

/**
 * The crash window of retry recognition: intake dies (kill -9) after the incident core committed
 * an error-tracker delivery's incident and before intake stored the answer for the sender's retry.
 * The retry, after the claim's 30 s lease, must find that incident, not open a second one: the
 * core keeps the retry key with the incident in the statement that opens it. The lease is run out
 * in the database rather than waited for: the retry meets the expired claim it would meet 30 s on.
 *
 * The window is held open from outside, in the database: a trigger makes intake's store of the
 * answer sleep, so the core's commit is done and intake is stuck right after it. The process
 * stuck there is found from its Postgres connection's port, and killed.
 */

const run = promisify(execFile);

let faults: FaultCluster;
let cluster: Cluster;
let sql: postgres.Sql;
let ingest: string;

beforeAll(async () => {
  faults = await startFaultCluster({ env: { SHUTDOWN_GRACE_SECONDS: "5", DATABASE_POOL_SIZE: "4" }, gateways: 1, intakes: 2 });
  ({ cluster, sql, ingest } = faults);
}, 180_000);

afterAll(async () => {
  await sql?.unsafe("select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep'").catch(() => {});
  await sql?.unsafe("drop trigger if exists hold_answers on intake.retry_keys").catch(() => {});
  await faults?.stop();
});

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await probe();
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The pid of the local process whose TCP connection has local port `port`. */
async function pidOfLocalPort(port: number): Promise<number | undefined> {
  const { stdout } = await run("ss", ["-Htnp", "state", "established", `( sport = :${port} )`]);
  const match = /pid=(\d+)/.exec(stdout);
  return match ? Number(match[1]) : undefined;
}

describe("kill -9 of intake between the incident core's commit and storing the answer", () => {
  it("the sender's retry after the lease gets the one incident: 0 doubled, 0 lost", async () => {
    await sql.unsafe(`
      create function intake.hold_answers() returns trigger language plpgsql as $$
      begin
        if new.state = 'answered' then perform pg_sleep(120); end if;
        return new;
      end $$;
      create trigger hold_answers before update on intake.retry_keys for each row execute function intake.hold_answers();
    `);

    const base = fixture("sentry/event-alert-triggered.json");
    const eventId = `crash-window-${Date.now()}`;
    const body = JSON.stringify({ ...base, data: { ...base.data, event: { ...base.data.event, event_id: eventId } } });
    const headers = { authorization: `Bearer ${ingest}`, "content-type": "application/json", "request-id": `req-${eventId}` };
    const post = () =>
      fetch(`${cluster.gatewayUrls[0]}/triggers`, { method: "POST", headers, body, signal: AbortSignal.timeout(40_000) }).then(
        async (res) => ({ status: res.status, body: (await res.json().catch(() => null)) as { outcome?: string; incidentId?: string } | null }),
        () => ({ status: 0, body: null }),
      );

    const first = post();
    // The core has committed the incident...
    const incidentId = await until("the incident", async () => {
      const [row] = await sql<{ incident_id: string }[]>`
        select incident_id::text from incidents.timeline_entries where kind = 'opened' and event_id = ${eventId}`;
      return row?.incident_id;
    });
    // ...and an intake is stuck storing the answer.
    const clientPort = await until("intake storing the answer", async () => {
      const [row] = await sql<{ client_port: number }[]>`
        select client_port from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep' and query ilike '%retry_keys%' and client_port is not null`;
      return row?.client_port;
    });
    const pid = await until("the process of that connection", () => pidOfLocalPort(clientPort));
    const victim = cluster.processes.find((p) => p.child.pid === pid);
    expect(victim?.name).toBe("intake");
    const exited = new Promise((r) => victim!.child.once("exit", r));
    victim!.child.kill("SIGKILL");
    await exited;
    // The dead process's statement sleeps on in its backend, holding its lock: end it, then lift the hold.
    await sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep'`;
    await sql.unsafe("drop trigger hold_answers on intake.retry_keys");
    const abandoned = await first;
    expect(abandoned.status === 0 || abandoned.status >= 500, `the first post was never answered 2xx: ${abandoned.status}`).toBe(true);

    // The claim of the dead process holds 30 s: run it out, as if the sender had waited that long.
    const expired = await sql`update intake.retry_keys set claimed_until = now() - interval '1 second' where state = 'working' returning key`;
    expect(expired).toHaveLength(1);
    // The sender retries until it gets an answer.
    let retry = { status: 0, body: null as { outcome?: string; incidentId?: string } | null };
    let attempts = 0;
    const deadline = Date.now() + 90_000;
    while (Date.now() < deadline) {
      attempts++;
      retry = await post();
      if (retry.status === 200 || retry.status === 201) break;
      await new Promise((r) => setTimeout(r, 1_000));
    }

    const opened = await sql<{ incident_id: string }[]>`
      select incident_id::text from incidents.timeline_entries where kind = 'opened' and event_id = ${eventId}`;
    console.table([
      {
        fault: "kill -9 of intake between the core's commit and storing the answer, then the retry",
        sent: 1,
        acknowledged: retry.status === 200 || retry.status === 201 ? 1 : 0,
        "found once": opened.length === 1 && opened[0]!.incident_id === retry.body?.incidentId ? 1 : 0,
        doubled: opened.length > 1 ? 1 : 0,
        "retry attempts": attempts,
      },
    ]);
    expect(retry.status).toBe(201);
    expect(retry.body).toMatchObject({ outcome: "opened", incidentId });
    expect(opened).toHaveLength(1);
  }, 180_000);
});
