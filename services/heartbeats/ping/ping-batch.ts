import type { Sql } from "../../runtime/data/database.js";
import type { KeptBody } from "./ping-body.js";

/** `log` (Healthchecks' `/log`) is kept in the history and changes nothing else. */
export type PingKind = "success" | "start" | "fail" | "log";

/** One ping to record: whose, what it signals, and what the job said. */
export interface PingWrite {
  orgId: string;
  name: string;
  kind: PingKind;
  exitStatus: number | null;
  /** The run_id, or the nil UUID for a run without one. */
  runKey: string;
  runId: string | null;
  body: KeptBody;
  client: string;
  /** A ping by key: the heartbeat must still hold this key hash (a rotated key matches nothing). */
  keyHash: string | null;
}

export interface PingRow {
  id: string;
  ended_silence_id: string | null;
  failure_id: string | null;
  schedule: string | null;
  timezone: string | null;
  grace_seconds: number;
  alert_after_misses: number;
  /**
   * now() of the ping, as text (to the microsecond; a Date keeps milliseconds only) and as a Date.
   * Passed back as text: a timestamptz parameter would go through a Date and lose the microseconds.
   */
  seen_at: string;
  seen: Date;
}

/**
 * Statements in flight at once: few, so that pings arriving meanwhile make large batches. Two
 * cost Postgres about a quarter less per ping than four (batches of 11 against 7) in the bench.
 */
const STATEMENTS_IN_FLIGHT = 2;
/** Pings per statement at most. */
const MAX_BATCH = 256;
/** A deadlock between two writers aborts one statement whole; it is run again this many times. */
const DEADLOCK_RETRIES = 3;

interface Waiting {
  write: PingWrite;
  key: string;
  resolve(row: PingRow | undefined): void;
  reject(err: unknown): void;
}

/**
 * Group commit for pings: every ping is one round trip of its own statement to Postgres, but
 * pings that arrive while statements are in flight are written together, in one statement and one
 * transaction. A heartbeat appears at most once in a statement, and a heartbeat with a ping in
 * flight waits for it: its pings are applied one after another in the order they arrived, exactly
 * as sequential pings would be (counted, history in order, starts and ends paired by run id).
 * Every statement locks its heartbeats in the same order (organization, name), so two of them
 * never deadlock on each other.
 *
 * `write` answers the heartbeat's row after the ping, or undefined when no heartbeat matched.
 */
export function createPingBatcher(sql: Sql): { write(ping: PingWrite): Promise<PingRow | undefined> } {
  const queue: Waiting[] = [];
  /** Heartbeats (org and name) with a ping in a statement in flight. */
  const busy = new Set<string>();
  let inFlight = 0;
  let refusals = 0;

  function dispatch(): void {
    while (inFlight < STATEMENTS_IN_FLIGHT && queue.length > 0) {
      const batch: Waiting[] = [];
      // Once a heartbeat's ping is held back, its later pings are held back too: arrival order.
      const held = new Set<string>();
      for (let i = 0; i < queue.length && batch.length < MAX_BATCH; ) {
        const waiting = queue[i]!;
        if (busy.has(waiting.key) || held.has(waiting.key)) {
          held.add(waiting.key);
          i++;
          continue;
        }
        busy.add(waiting.key);
        batch.push(waiting);
        queue.splice(i, 1);
      }
      if (batch.length === 0) return;
      inFlight++;
      void run(batch);
    }
  }

  async function run(batch: Waiting[]): Promise<void> {
    try {
      const rows = await writeWithRetry(batch.map((w) => w.write));
      for (const [n, waiting] of batch.entries()) waiting.resolve(rows.get(n));
    } catch (err) {
      for (const waiting of batch) waiting.reject(err);
    } finally {
      for (const waiting of batch) busy.delete(waiting.key);
      inFlight--;
      dispatch();
    }
  }

  async function writeWithRetry(writes: PingWrite[]): Promise<Map<number, PingRow>> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await writeAll(sql, writes);
      } catch (err) {
        if ((err as { code?: string }).code !== "40P01" || attempt >= DEADLOCK_RETRIES) throw err;
      }
    }
  }

  return {
    write(ping) {
      return new Promise((resolve, reject) => {
        // A ping with no name (a refusal: unknown key or a name no heartbeat can have) matches no
        // row, so it never needs to wait for another: all of them sharing one key made refusals
        // run one statement each, one after another (271 a second in the bench).
        const key = ping.name === "" ? `refused/${++refusals}` : `${ping.orgId}/${ping.name}`;
        queue.push({ write: ping, key, resolve, reject });
        dispatch();
      });
    },
  };
}

/**
 * Every part of each ping in one statement: last seen and the next deadline, the run it starts or
 * ends, a failure, the silence it ends (whose `resumed` is then pending on that silence's own
 * row), what the job said, and its slot in the history. `hb` locks the rows first, so each ping sees the silence the previous ping of its heartbeat left: a ping ends only the
 * silence open when it runs, and every ended silence keeps its own pending `resumed`. The pings
 * arrive as one JSON parameter: one prepared statement whatever the batch size.
 */
async function writeAll(sql: Sql, writes: PingWrite[]): Promise<Map<number, PingRow>> {
  const input = JSON.stringify(
    writes.map((w, n) => ({
      n,
      org_id: w.orgId,
      name: w.name,
      kind: w.kind,
      exit_status: w.exitStatus,
      run_key: w.runKey,
      run_id: w.runId,
      body: w.body.text,
      body_cut: w.body.cut,
      body_bytes: w.body.bytes,
      client: w.client,
      key_hash: w.keyHash,
    })),
  );
  const rows = await sql<(PingRow & { n: number })[]>`
    with input as (
      select * from json_to_recordset((${input}::text)::json) as i(n integer, org_id uuid, name text, kind text, exit_status integer,
        run_key uuid, run_id uuid, body text, body_cut boolean, body_bytes integer, client text, key_hash text)
    ), hb as (
      -- One index lookup per ping (a join could scan the table: the planner cannot count the
      -- input), and the rows locked in (org, name) order.
      select h.id, h.open_silence_id, h.max_run_seconds, h.min_run_seconds, i.n, i.kind, i.exit_status, i.run_key, i.run_id, i.body, i.body_cut, i.body_bytes, i.client
      from (select * from input order by org_id, name) i
      cross join lateral (
        select id, open_silence_id, max_run_seconds, min_run_seconds from heartbeats.heartbeats
        where org_id = i.org_id and name = i.name and (i.key_hash is null or ping_key_hash = i.key_hash)
        for update
      ) h
    ), ended_run as (
      delete from heartbeats.runs r using hb
      where hb.kind in ('success', 'fail') and r.heartbeat_id = hb.id and r.run_key = hb.run_key
      returning r.heartbeat_id, r.started_at
    ), started_run as (
      insert into heartbeats.runs (heartbeat_id, run_key, started_at, overrun_at)
      select hb.id, hb.run_key, now(), now() + make_interval(secs => hb.max_run_seconds) from hb where hb.kind = 'start'
      on conflict (heartbeat_id, run_key) do update
        set started_at = excluded.started_at, overrun_at = excluded.overrun_at, overrun_silence_id = null
    ), failure as (
      -- A failure, or a success that ended its run sooner than the heartbeat's shortest run
      -- ('quick': a job that did nothing still exits 0).
      insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged, cause, exit_status, body, body_cut, body_bytes, run_id,
        last_run_seconds)
      select hb.id, now(), now(), false, case when hb.kind = 'fail' then 'fail' else 'quick' end, hb.exit_status, hb.body, hb.body_cut,
        hb.body_bytes, hb.run_id, extract(epoch from now() - er.started_at)::float8
      from hb left join ended_run er on er.heartbeat_id = hb.id
      where hb.kind = 'fail'
        or (hb.kind = 'success' and hb.min_run_seconds is not null and er.started_at > now() - make_interval(secs => hb.min_run_seconds))
      returning id, heartbeat_id
    ), upd as (
      update heartbeats.heartbeats h set
        last_seen_at = case when hb.kind in ('start', 'log') then h.last_seen_at else now() end,
        -- A ping resumes a paused heartbeat (as in Healthchecks), a log line does not: the
        -- expected pings count from this one, a start's included.
        deadline = case when hb.kind = 'log' or (hb.kind = 'start' and h.paused_at is null) then h.deadline
          else now() + make_interval(secs => coalesce(h.expected_interval_seconds, h.schedule_gap_seconds) * h.alert_after_misses + h.grace_seconds) end,
        paused_at = case when hb.kind = 'log' then h.paused_at else null end,
        open_silence_id = case when failure.id is not null then coalesce(h.open_silence_id, failure.id)
          when hb.kind = 'success' then null else h.open_silence_id end,
        -- A log line is history only: the latest ping stays the job's latest signal.
        last_ping_at = case when hb.kind = 'log' then h.last_ping_at else now() end,
        last_ping_kind = case when hb.kind = 'log' then h.last_ping_kind else hb.kind end,
        last_ping_exit_status = case when hb.kind = 'log' then h.last_ping_exit_status else hb.exit_status end,
        last_ping_run_seconds = case when hb.kind = 'log' then h.last_ping_run_seconds
          else extract(epoch from now() - ended_run.started_at)::float8 end,
        last_ping_body = case when hb.kind = 'log' then h.last_ping_body else hb.body end,
        last_ping_body_cut = case when hb.kind = 'log' then h.last_ping_body_cut else hb.body_cut end,
        last_ping_body_bytes = case when hb.kind = 'log' then h.last_ping_body_bytes else hb.body_bytes end,
        -- The last run that ended, which a later start does not replace (a silence reports it).
        last_end_at = case when hb.kind in ('success', 'fail') then now() else h.last_end_at end,
        last_end_kind = case when hb.kind in ('success', 'fail') then hb.kind else h.last_end_kind end,
        last_end_exit_status = case when hb.kind in ('success', 'fail') then hb.exit_status else h.last_end_exit_status end,
        last_end_run_seconds = case when hb.kind in ('success', 'fail') then extract(epoch from now() - ended_run.started_at)::float8
          else h.last_end_run_seconds end,
        last_end_body = case when hb.kind in ('success', 'fail') then hb.body else h.last_end_body end,
        last_end_body_cut = case when hb.kind in ('success', 'fail') then hb.body_cut else h.last_end_body_cut end,
        last_end_body_bytes = case when hb.kind in ('success', 'fail') then hb.body_bytes else h.last_end_body_bytes end,
        ping_count = h.ping_count + 1
      from hb
        left join failure on failure.heartbeat_id = hb.id
        left join ended_run on ended_run.heartbeat_id = hb.id
      where h.id = hb.id
      returning hb.n, h.id, h.ping_count, h.last_ping_run_seconds, h.schedule, h.timezone, h.grace_seconds, h.alert_after_misses,
        now()::text as seen_at, now() as seen,
        case when hb.kind = 'success' and failure.id is null then hb.open_silence_id end as ended_silence_id,
        failure.id as failure_id,
        hb.kind, hb.exit_status, hb.run_id, hb.body, hb.body_cut, hb.body_bytes, hb.client
    ), ended as (
      update heartbeats.silences s
      set ended_at = now(), ended_body = upd.body, ended_body_cut = upd.body_cut, ended_body_bytes = upd.body_bytes,
        ended_run_seconds = upd.last_ping_run_seconds
      from upd where s.id = upd.ended_silence_id
    ), history as (
      insert into heartbeats.pings (heartbeat_id, slot, seq, at, kind, run_id, run_seconds, exit_status, client_address, body_bytes, body, body_cut)
      select upd.id, (upd.ping_count % 100)::smallint, upd.ping_count, now(), upd.kind, upd.run_id,
        case when upd.kind = 'log' then null else upd.last_ping_run_seconds end, upd.exit_status, upd.client, upd.body_bytes, upd.body, upd.body_cut
      from upd
      on conflict (heartbeat_id, slot) do update set seq = excluded.seq, at = excluded.at, kind = excluded.kind,
        run_id = excluded.run_id, run_seconds = excluded.run_seconds, exit_status = excluded.exit_status,
        client_address = excluded.client_address, body_bytes = excluded.body_bytes, body = excluded.body, body_cut = excluded.body_cut
    )
    select n, id, ended_silence_id, failure_id, schedule, timezone, grace_seconds, alert_after_misses, seen_at, seen from upd`;
  return new Map(rows.map((row) => [row.n, row]));
}
