import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HeartbeatSchema } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import type { Sql } from "../runtime/database.js";

/** A heartbeat row as the management routes read it. */
export interface HeartbeatRow {
  id: string;
  name: string;
  expected_interval_seconds: number | null;
  grace_seconds: number;
  schedule: string | null;
  timezone: string | null;
  max_run_seconds: number | null;
  created_at: Date;
  last_seen_at: Date | null;
  deadline: Date;
  silent: boolean;
  last_ping_at: Date | null;
  last_ping_kind: string | null;
  last_ping_exit_status: number | null;
  last_ping_run_seconds: number | null;
  last_ping_body: string | null;
  last_ping_body_cut: boolean | null;
  last_ping_body_bytes: number | null;
  running_since: Date | null;
}

/** The columns of HeartbeatRow, for `select` and `returning` on heartbeats.heartbeats (no alias). */
export function heartbeatColumns(sql: Sql) {
  // "Silent" once a sweep has declared it, or as soon as the deadline is behind us.
  return sql`id, name, expected_interval_seconds, grace_seconds, schedule, timezone, max_run_seconds, created_at, last_seen_at,
    deadline, (open_silence_id is not null or deadline < now()) as silent,
    last_ping_at, last_ping_kind, last_ping_exit_status, last_ping_run_seconds, last_ping_body, last_ping_body_cut, last_ping_body_bytes,
    (select min(r.started_at) from heartbeats.runs r where r.heartbeat_id = heartbeats.id) as running_since`;
}

/**
 * A heartbeat row as the API answers it (status, due time, schedule, latest ping, run in progress).
 */
export function toHeartbeat(row: HeartbeatRow): MessageInitShape<typeof HeartbeatSchema> {
  return {
    name: row.name,
    expectedIntervalSeconds: row.expected_interval_seconds ?? 0,
    graceSeconds: row.grace_seconds,
    lastSeenAt: row.last_seen_at ? timestampFromDate(row.last_seen_at) : undefined,
    createdAt: timestampFromDate(row.created_at),
    dueAt: timestampFromDate(row.deadline),
    status: row.silent ? "silent" : "ok",
    schedule: row.schedule ?? undefined,
    timezone: row.timezone ?? undefined,
    maxRunSeconds: row.max_run_seconds ?? undefined,
    nextExpectedAt: timestampFromDate(new Date(row.deadline.getTime() - row.grace_seconds * 1000)),
    lastPing:
      row.last_ping_kind && row.last_ping_at
        ? {
            at: timestampFromDate(row.last_ping_at),
            kind: row.last_ping_kind,
            exitStatus: row.last_ping_exit_status ?? undefined,
            runSeconds: row.last_ping_run_seconds ?? undefined,
            body: row.last_ping_body ?? "",
            bodyCut: row.last_ping_body_cut ?? false,
            bodyBytes: row.last_ping_body_bytes ?? 0,
          }
        : undefined,
    runningSince: row.running_since ? timestampFromDate(row.running_since) : undefined,
  };
}
