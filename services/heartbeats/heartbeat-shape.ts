import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HeartbeatSchema } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { expectedAfter } from "../domain/schedule.js";
import type { HeartbeatRow } from "./store.js";

/**
 * A heartbeat row as the API answers it (status, due time, schedule, latest ping, run in progress).
 */
export function toHeartbeat(row: HeartbeatRow, pingUrl: string): MessageInitShape<typeof HeartbeatSchema> {
  return {
    name: row.name,
    expectedIntervalSeconds: row.expected_interval_seconds ?? 0,
    graceSeconds: row.grace_seconds,
    lastSeenAt: row.last_seen_at ? timestampFromDate(row.last_seen_at) : undefined,
    createdAt: timestampFromDate(row.created_at),
    // Paused, nothing is due: neither a deadline nor an expected ping.
    dueAt: row.paused_at ? undefined : timestampFromDate(row.deadline),
    status: row.paused_at ? "paused" : row.silent ? "silent" : "ok",
    pausedAt: row.paused_at ? timestampFromDate(row.paused_at) : undefined,
    schedule: row.schedule ?? undefined,
    timezone: row.timezone ?? undefined,
    maxRunSeconds: row.max_run_seconds ?? undefined,
    minRunSeconds: row.min_run_seconds ?? undefined,
    alertAfterMisses: row.alert_after_misses,
    openIncidentId: row.open_incident_id || undefined,
    nextExpectedAt: row.paused_at ? undefined : timestampFromDate(nextExpected(row)),
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
    pingUrl,
  };
}

/**
 * The next expected ping: the deadline without grace when the first miss alerts; with more misses
 * allowed, the first expected ping after the last one (or the registration).
 */
function nextExpected(row: HeartbeatRow): Date {
  if (row.alert_after_misses <= 1) return new Date(row.deadline.getTime() - row.grace_seconds * 1000);
  return expectedAfter(row.last_seen_at ?? row.created_at, { interval: row.expected_interval_seconds, schedule: row.schedule, timezone: row.timezone }, 1);
}

/** When a heartbeat expects its pings, as audit entries and silence alerts record it: a schedule or an interval. */
export function cadenceData(row: { schedule: string | null; timezone: string | null; expected_interval_seconds: number | null }): JsonObject {
  return row.schedule ? { schedule: row.schedule, timezone: row.timezone } : { expectedIntervalSeconds: row.expected_interval_seconds };
}
