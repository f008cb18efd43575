import { create, type JsonObject } from "@bufbuild/protobuf";
import type { EscalationSteps } from "../../domain/escalation-rules.js";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ConnectError, type HandlerContext } from "@connectrpc/connect";
import { z } from "zod";
import type { Heartbeat } from "../../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { CreateMaintenanceWindowRequestSchema, type MaintenanceWindow } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { checkGrace, checkInterval, checkMaxRun, checkMinRun, checkName, checkRunLimits } from "../../domain/heartbeat-rules.js";
import { checkSchedule } from "../../domain/schedule.js";
import { checkWindow } from "../../domain/maintenance-window-rules.js";
import type { Clients } from "../../runtime/transport/clients.js";
import { InvalidArgumentError } from "../../runtime/errors.js";

/**
 * Heartbeats and maintenance windows in the configuration file. They belong to their own services,
 * so they are read and changed through those services' methods with the caller's own credential
 * (each service checks the role and writes its own audit record); what this module adds is the
 * file's shape, the checks before anything changes, and the plan.
 */

const seconds = z.number().int();

export const heartbeatEntrySchema = z
  .object({
    name: z.string(),
    expectedIntervalSeconds: seconds.optional(),
    schedule: z.string().optional(),
    timezone: z.string().optional(),
    graceSeconds: seconds.optional(),
    maxRunSeconds: seconds.optional(),
    minRunSeconds: seconds.optional(),
  })
  .strict();

export const maintenanceWindowEntrySchema = z
  .object({
    startsAt: z.union([z.string(), z.date()]),
    endsAt: z.union([z.string(), z.date()]),
    reason: z.string(),
    match: z
      .object({
        sources: z.array(z.string()).optional(),
        entities: z.array(z.object({ kind: z.string(), id: z.string() }).strict()).optional(),
      })
      .strict()
      .optional(),
  })
  .strict();

/** A heartbeat as the file says it and as it is compared: an interval or a schedule in its time zone. */
export interface HeartbeatSpec {
  name: string;
  expectedIntervalSeconds?: number;
  schedule?: string;
  timezone?: string;
  graceSeconds: number;
  maxRunSeconds?: number;
  minRunSeconds?: number;
}

/** A maintenance window as the file says it; windows have no name, so what they are is who they are. */
export interface WindowSpec {
  startsAt: Date;
  endsAt: Date;
  reason: string;
  sources: string[];
  entities: { kind: string; id: string }[];
}

/** The heartbeat's fields in the file's order, empty ones left out. */
function heartbeatEntry(spec: HeartbeatSpec): JsonObject {
  const entry: JsonObject = { name: spec.name };
  if (spec.schedule !== undefined) {
    entry.schedule = spec.schedule;
    entry.timezone = spec.timezone ?? "UTC";
  } else entry.expectedIntervalSeconds = spec.expectedIntervalSeconds ?? 0;
  entry.graceSeconds = spec.graceSeconds;
  if (spec.maxRunSeconds) entry.maxRunSeconds = spec.maxRunSeconds;
  if (spec.minRunSeconds) entry.minRunSeconds = spec.minRunSeconds;
  return entry;
}

export function sameHeartbeat(a: HeartbeatSpec, b: HeartbeatSpec): boolean {
  return JSON.stringify(heartbeatEntry(a)) === JSON.stringify(heartbeatEntry(b));
}

export function heartbeatSpecOf(h: Heartbeat): HeartbeatSpec {
  const spec: HeartbeatSpec = { name: h.name, graceSeconds: h.graceSeconds };
  if (h.schedule !== undefined) {
    spec.schedule = h.schedule;
    spec.timezone = h.timezone ?? "UTC";
  } else spec.expectedIntervalSeconds = h.expectedIntervalSeconds;
  if (h.maxRunSeconds) spec.maxRunSeconds = h.maxRunSeconds;
  if (h.minRunSeconds) spec.minRunSeconds = h.minRunSeconds;
  return spec;
}

/** Checks a file's heartbeat with the heartbeat service's own rules, so a bad one refuses the whole file up front. */
export function checkHeartbeatEntry(entry: z.infer<typeof heartbeatEntrySchema>, index: number): HeartbeatSpec {
  try {
    checkName(entry.name);
    const spec: HeartbeatSpec = { name: entry.name, graceSeconds: 0 };
    if (entry.schedule !== undefined) {
      if (entry.expectedIntervalSeconds) throw new InvalidArgumentError("send either expectedIntervalSeconds or schedule, not both");
      const checked = checkSchedule(entry.schedule, entry.timezone);
      spec.schedule = checked.schedule;
      spec.timezone = checked.timezone;
    } else {
      if (entry.timezone !== undefined) throw new InvalidArgumentError("timezone goes with a schedule");
      spec.expectedIntervalSeconds = checkInterval(entry.expectedIntervalSeconds);
    }
    spec.graceSeconds = checkGrace(entry.graceSeconds);
    const maxRun = entry.maxRunSeconds === undefined ? null : checkMaxRun(entry.maxRunSeconds);
    const minRun = entry.minRunSeconds === undefined ? null : checkMinRun(entry.minRunSeconds);
    checkRunLimits(minRun, maxRun);
    if (maxRun !== null) spec.maxRunSeconds = maxRun;
    if (minRun !== null) spec.minRunSeconds = minRun;
    return spec;
  } catch (err) {
    throw new InvalidArgumentError(`heartbeats[${index}] (${entry.name}): ${ConnectError.from(err).rawMessage}`);
  }
}

function fileTime(field: string, value: string | Date, index: number): Date {
  const date = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(date.getTime())) throw new InvalidArgumentError(`maintenanceWindows[${index}].${field}: not an RFC 3339 time such as 2026-12-01T02:00:00Z`);
  return date;
}

/** Checks a file's window with the incident service's own rules. */
export function checkWindowEntry(entry: z.infer<typeof maintenanceWindowEntrySchema>, index: number): WindowSpec {
  const startsAt = fileTime("startsAt", entry.startsAt, index);
  const endsAt = fileTime("endsAt", entry.endsAt, index);
  try {
    const w = checkWindow(
      create(CreateMaintenanceWindowRequestSchema, {
        startsAt: timestampFromDate(startsAt),
        endsAt: timestampFromDate(endsAt),
        reason: entry.reason,
        match: { sources: entry.match?.sources ?? [], entities: entry.match?.entities ?? [] },
      }),
    );
    return { startsAt: w.startsAt, endsAt: w.endsAt, reason: w.reason, sources: w.sources, entities: w.entities };
  } catch (err) {
    throw new InvalidArgumentError(`maintenanceWindows[${index}]: ${ConnectError.from(err).rawMessage}`);
  }
}

export function windowSpecOf(w: MaintenanceWindow): WindowSpec {
  return {
    startsAt: w.startsAt ? timestampDate(w.startsAt) : new Date(0),
    endsAt: w.endsAt ? timestampDate(w.endsAt) : new Date(0),
    reason: w.reason,
    sources: [...(w.match?.sources ?? [])],
    entities: (w.match?.entities ?? []).map((e) => ({ kind: e.kind, id: e.id })),
  };
}

/** What makes two windows one: the same times, reason and match (order of the match lists aside). */
export function windowKey(w: WindowSpec): string {
  const entities = w.entities.map((e) => `${e.kind}\n${e.id}`).sort();
  return JSON.stringify([w.startsAt.toISOString(), w.endsAt.toISOString(), w.reason, [...w.sources].sort(), entities]);
}

/** How the plan names a window. */
export function windowName(w: WindowSpec): string {
  return `${w.startsAt.toISOString()}/${w.endsAt.toISOString()} ${w.reason}`;
}

export function windowEntry(w: WindowSpec): JsonObject {
  const entry: JsonObject = { startsAt: w.startsAt.toISOString(), endsAt: w.endsAt.toISOString(), reason: w.reason };
  const match: JsonObject = {};
  if (w.sources.length > 0) match.sources = w.sources;
  if (w.entities.length > 0) match.entities = w.entities;
  if (Object.keys(match).length > 0) entry.match = match;
  return entry;
}

export { heartbeatEntry };

/** The two services' methods, called with the caller's credential so each checks the role itself. */
export function scheduleCalls(clients: Clients, org: string, context: HandlerContext) {
  const options = {
    signal: context.signal,
    headers: { authorization: context.requestHeader.get("authorization") ?? "", "x-request-id": context.requestHeader.get("x-request-id") ?? "" },
  };
  return {
    async heartbeats(): Promise<Heartbeat[]> {
      const all: Heartbeat[] = [];
      let cursor = "";
      for (;;) {
        const page = await clients.heartbeats.listHeartbeats({ org, cursor, limit: 10_000 }, options);
        all.push(...page.heartbeats);
        if (!page.nextCursor) return all;
        cursor = page.nextCursor;
      }
    },
    async escalation(): Promise<EscalationSteps[]> {
      return (await clients.incidents.getEscalationPolicy({ org }, options)).severities.map((s) => ({ severity: s.severity, minutes: s.minutes }));
    },
    async putEscalation(severities: EscalationSteps[]): Promise<void> {
      await clients.incidents.putEscalationPolicy({ org, severities }, options);
    },
    async windows(): Promise<MaintenanceWindow[]> {
      return (await clients.incidents.listMaintenanceWindows({ org }, options)).maintenanceWindows;
    },
    async registerHeartbeat(spec: HeartbeatSpec): Promise<void> {
      await clients.heartbeats.registerHeartbeat(
        {
          org,
          name: spec.name,
          expectedIntervalSeconds: spec.expectedIntervalSeconds ?? 0,
          graceSeconds: spec.graceSeconds,
          schedule: spec.schedule,
          timezone: spec.schedule !== undefined ? spec.timezone : undefined,
          maxRunSeconds: spec.maxRunSeconds,
          minRunSeconds: spec.minRunSeconds,
        },
        options,
      );
    },
    async updateHeartbeat(spec: HeartbeatSpec): Promise<void> {
      await clients.heartbeats.updateHeartbeat(
        {
          org,
          heartbeat: spec.name,
          graceSeconds: spec.graceSeconds,
          ...(spec.schedule !== undefined
            ? { schedule: spec.schedule, timezone: spec.timezone ?? "UTC" }
            : { expectedIntervalSeconds: spec.expectedIntervalSeconds }),
          // 0 removes a limit.
          maxRunSeconds: spec.maxRunSeconds ?? 0,
          minRunSeconds: spec.minRunSeconds ?? 0,
        },
        options,
      );
    },
    async deleteHeartbeat(name: string): Promise<void> {
      await clients.heartbeats.deleteHeartbeat({ org, name }, options);
    },
    async createWindow(w: WindowSpec): Promise<void> {
      await clients.incidents.createMaintenanceWindow(
        {
          org,
          startsAt: timestampFromDate(w.startsAt),
          endsAt: timestampFromDate(w.endsAt),
          reason: w.reason,
          match: { sources: w.sources, entities: w.entities },
        },
        options,
      );
    },
    async deleteWindow(id: string): Promise<void> {
      await clients.incidents.deleteMaintenanceWindow({ org, id }, options);
    },
  };
}
