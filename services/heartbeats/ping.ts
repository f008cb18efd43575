import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { HeartbeatsService, PingRequest } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { bearerToken } from "../runtime/auth.js";
import type { IngestTokenResolver } from "../runtime/ingest-token-cache.js";
import type { Sql } from "../runtime/database.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import type { Logger } from "../runtime/logger.js";
import { keepBody } from "./ping-body.js";
import { nextScheduled } from "./schedule.js";
import type { SilenceDelivery } from "./silence-delivery.js";

const INGEST_TOKEN_FORMAT = /^[0-9a-f]{64}$/;
/** Matches no heartbeat: the update still runs when the token is not this organization's. */
const NO_ORGANIZATION = "00000000-0000-0000-0000-000000000000";
/** The run key of a run without a run_id: one such run at a time per heartbeat. */
export const NO_RUN_ID = "00000000-0000-0000-0000-000000000000";

/** The one answer to every refused ping: nothing tells a wrong token from an unknown name. */
export const PING_REJECTION = "not found";

export type PingKind = "success" | "start" | "fail";

interface Signal {
  kind: PingKind;
  exitStatus: number | null;
}

/** "" (a plain ping) and "0" are success, "start" starts a run, "fail" and 1-255 are failures. */
export function parseSignal(signal: string): Signal | undefined {
  if (signal === "") return { kind: "success", exitStatus: null };
  if (signal === "start") return { kind: "start", exitStatus: null };
  if (signal === "fail") return { kind: "fail", exitStatus: null };
  if (/^\d{1,3}$/.test(signal)) {
    const status = Number(signal);
    if (status > 255) return undefined;
    return { kind: status === 0 ? "success" : "fail", exitStatus: status };
  }
  return undefined;
}

interface PingRow {
  id: string;
  ended_silence_id: string | null;
  failure_id: string | null;
  schedule: string | null;
  timezone: string | null;
  grace_seconds: number;
  /**
   * now() of the ping, as text (to the microsecond; a Date keeps milliseconds only) and as a Date.
   * Passed back as text: a timestamptz parameter would go through a Date and lose the microseconds.
   */
  seen_at: string;
  seen: Date;
}

/**
 * The hot path: one database round trip. The ingest token resolves through the process's token
 * cache (identity is asked once per token, known or not), and one statement records the ping:
 * last seen and the next deadline, the run it starts or ends, a failure, the silence it ends
 * (whose `resumed` is then pending on that silence's own row), what the job said, and its slot in
 * the history. The refusals (no token, wrong token, another organization's token, unknown name)
 * run the same statement against no organization and end in the same NotFound, so neither the
 * answer nor its timing says which one it was.
 */
export function createPingHandler(deps: {
  sql: Sql;
  ingestTokens: IngestTokenResolver;
  delivery: SilenceDelivery;
  logger: Logger;
}): Pick<ServiceImpl<typeof HeartbeatsService>, "ping" | "pingSignal"> {
  const { sql, ingestTokens, delivery, logger } = deps;

  /**
   * A scheduled heartbeat's ping wrote a deadline one whole schedule gap away (never early); the
   * exact one, the next scheduled time after the ping, follows right after the answer. A crash
   * in between leaves the safe one. Only the ping that wrote it is corrected.
   */
  function exactDeadlineSoon(row: PingRow): void {
    const deadline = new Date(nextScheduled(row.schedule!, row.timezone ?? "UTC", row.seen).getTime() + row.grace_seconds * 1000);
    delivery.track(
      sql`
        update heartbeats.heartbeats set deadline = ${deadline}
        where id = ${row.id} and last_seen_at = (${row.seen_at}::text)::timestamptz and open_silence_id is null`.catch((err) =>
        logger.warn({ err: String(err), heartbeat: row.id }, "could not write the exact deadline; the safe one stays"),
      ),
    );
  }

  async function record(req: PingRequest, context: HandlerContext, signal: Signal): Promise<Record<string, never>> {
    let runId: string | null = null;
    if (req.runId) {
      runId = req.runId.toLowerCase();
      if (!isUuid(runId)) throw new InvalidArgumentError("run_id must be a UUID");
    }
    const token = bearerToken(context.requestHeader.get("authorization"));
    let orgId = NO_ORGANIZATION;
    if (token && INGEST_TOKEN_FORMAT.test(token)) {
      try {
        const org = await ingestTokens.resolve(token, context.signal);
        if (org.slug === req.org) orgId = org.id;
      } catch (err) {
        if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
      }
    }
    const body = keepBody(req.body);
    const client = (context.requestHeader.get("x-forwarded-for") ?? "").split(",")[0]!.trim();
    const { kind, exitStatus } = signal;
    const runKey = runId ?? NO_RUN_ID;
    // Every part of the ping in one statement. `hb` locks the row first, so concurrent pings of
    // one heartbeat queue and each sees the silence the previous one left: a ping ends only the
    // silence open when it runs, and every ended silence keeps its own pending `resumed`.
    const [row] = await sql<PingRow[]>`
      with hb as (
        select id, open_silence_id, max_run_seconds from heartbeats.heartbeats
        where org_id = ${orgId} and name = ${req.name}
        for update
      ), ended_run as (
        delete from heartbeats.runs r using hb
        where ${kind}::text <> 'start' and r.heartbeat_id = hb.id and r.run_key = ${runKey}::uuid
        returning r.started_at
      ), started_run as (
        insert into heartbeats.runs (heartbeat_id, run_key, started_at, overrun_at)
        select hb.id, ${runKey}::uuid, now(), now() + make_interval(secs => hb.max_run_seconds) from hb where ${kind}::text = 'start'
        on conflict (heartbeat_id, run_key) do update
          set started_at = excluded.started_at, overrun_at = excluded.overrun_at, overrun_silence_id = null
      ), failure as (
        insert into heartbeats.silences (heartbeat_id, deadline, since, never_pinged, cause, exit_status, body, body_cut, body_bytes, run_id)
        select hb.id, now(), now(), false, 'fail', ${exitStatus}::integer, ${body.text}, ${body.cut}, ${body.bytes}, ${runId}::uuid
        from hb where ${kind}::text = 'fail'
        returning id
      ), upd as (
        update heartbeats.heartbeats h set
          last_seen_at = case when ${kind}::text = 'start' then h.last_seen_at else now() end,
          deadline = case when ${kind}::text = 'start' then h.deadline
            else now() + make_interval(secs => coalesce(h.expected_interval_seconds, h.schedule_gap_seconds) + h.grace_seconds) end,
          open_silence_id = case ${kind}::text when 'success' then null
            when 'fail' then coalesce(h.open_silence_id, (select id from failure)) else h.open_silence_id end,
          last_ping_at = now(), last_ping_kind = ${kind}::text, last_ping_exit_status = ${exitStatus}::integer,
          last_ping_run_seconds = (select extract(epoch from now() - started_at)::float8 from ended_run),
          last_ping_body = ${body.text}, last_ping_body_cut = ${body.cut}, last_ping_body_bytes = ${body.bytes},
          ping_count = h.ping_count + 1
        from hb where h.id = hb.id
        returning h.id, h.ping_count, h.last_ping_run_seconds, h.schedule, h.timezone, h.grace_seconds, now()::text as seen_at, now() as seen,
          case when ${kind}::text = 'success' then hb.open_silence_id end as ended_silence_id,
          (select id from failure) as failure_id
      ), ended as (
        update heartbeats.silences s
        set ended_at = now(), ended_body = ${body.text}, ended_body_cut = ${body.cut}, ended_body_bytes = ${body.bytes}, ended_run_seconds = upd.last_ping_run_seconds
        from upd where s.id = upd.ended_silence_id
      ), history as (
        insert into heartbeats.pings (heartbeat_id, slot, seq, at, kind, run_id, run_seconds, exit_status, client_address, body_bytes)
        select upd.id, (upd.ping_count % 100)::smallint, upd.ping_count, now(), ${kind}::text, ${runId}::uuid,
          upd.last_ping_run_seconds, ${exitStatus}::integer, ${client}, ${body.bytes}
        from upd
        on conflict (heartbeat_id, slot) do update set seq = excluded.seq, at = excluded.at, kind = excluded.kind,
          run_id = excluded.run_id, run_seconds = excluded.run_seconds, exit_status = excluded.exit_status,
          client_address = excluded.client_address, body_bytes = excluded.body_bytes
      )
      select id, ended_silence_id, failure_id, schedule, timezone, grace_seconds, seen_at, seen from upd`;
    if (!row) throw new NotFoundError(PING_REJECTION);
    if (row.ended_silence_id) delivery.resumeSoon(row.ended_silence_id);
    if (row.failure_id) delivery.alertSoon(row.failure_id);
    if (row.schedule && kind !== "start") exactDeadlineSoon(row);
    return {};
  }

  return {
    async ping(req, context: HandlerContext) {
      return record(req, context, { kind: "success", exitStatus: null });
    },
    async pingSignal(req, context: HandlerContext) {
      const signal = parseSignal(req.signal);
      // An unknown signal is a path that does not exist: the same answer as every refusal.
      if (!signal) throw new NotFoundError(PING_REJECTION);
      return record(req, context, signal);
    },
  };
}
