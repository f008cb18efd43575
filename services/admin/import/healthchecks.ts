import { z } from "zod";
import { NAME_PATTERN } from "../../domain/heartbeat-rules.js";

/**
 * Healthchecks' Management API export of checks (`GET /api/v3/checks/`, saved to a file) turned
 * into registrations here: name (its slug, or the name made one), a period (`timeout`) or a cron
 * `schedule` with its `tz`, and `grace`. Pure: the command that sends them is
 * `healthchecks-cli.ts`.
 */

const check = z
  .object({
    name: z.string(),
    slug: z.string().optional().nullable(),
    timeout: z.number().optional().nullable(),
    schedule: z.string().optional().nullable(),
    tz: z.string().optional().nullable(),
    grace: z.number(),
    ping_url: z.string().optional().nullable(),
    // new, up, grace, down, started or paused.
    status: z.string().optional().nullable(),
    unique_key: z.string().optional().nullable(),
  })
  .passthrough();

/** The export as the API answers it (`{checks: [...]}`), or just its list. */
const exportFile = z.union([z.object({ checks: z.array(check) }).passthrough(), z.array(check)]);

export interface PlannedHeartbeat {
  name: string;
  /** The check's ping URL there ("" when the export was made with a read-only key). */
  oldPingUrl: string;
  /** The registration's body: `POST /o/{org}/heartbeats`. */
  body: { name: string; graceSeconds: number; expectedIntervalSeconds?: number; schedule?: string; timezone?: string };
  /** Paused there: paused here once registered (`PATCH … {"paused": true}`), so it does not alert. */
  paused: boolean;
}

export interface ImportPlan {
  planned: PlannedHeartbeat[];
  skipped: { check: string; reason: string }[];
}

/** A heartbeat name from a check's slug or name: lowercase, `-` for anything else, 63 at most. */
export function heartbeatNameOf(slug: string | null | undefined, name: string): string {
  const from = slug?.trim() || name;
  return from
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, "-")
    .replace(/-{2,}/g, "-")
    .replace(/^[^a-z0-9]+/, "")
    .slice(0, 63)
    .replace(/-+$/, "");
}

/** Reads the export; throws with the reason when it is not one. */
export function planImport(json: unknown): ImportPlan {
  const parsed = exportFile.safeParse(json);
  if (!parsed.success) {
    throw new Error(`not a Healthchecks export of checks (GET /api/v3/checks/): ${parsed.error.issues[0]?.path.join(".")} ${parsed.error.issues[0]?.message}`);
  }
  const checks = Array.isArray(parsed.data) ? parsed.data : parsed.data.checks;
  const plan: ImportPlan = { planned: [], skipped: [] };
  const taken = new Set<string>();
  for (const c of checks) {
    const name = heartbeatNameOf(c.slug, c.name);
    if (!NAME_PATTERN.test(name)) {
      plan.skipped.push({ check: c.name, reason: "no usable name: give it a slug of letters and digits" });
      continue;
    }
    if (taken.has(name)) {
      plan.skipped.push({ check: c.name, reason: `the name "${name}" is taken by an earlier check in the export` });
      continue;
    }
    // Grace 0 is refused here (1 behaves as none); Healthchecks' smallest is 60.
    const graceSeconds = Math.max(1, Math.round(c.grace));
    let body: PlannedHeartbeat["body"];
    if (c.schedule) body = { name, schedule: c.schedule, timezone: c.tz || "UTC", graceSeconds };
    else if (c.timeout) body = { name, expectedIntervalSeconds: Math.round(c.timeout), graceSeconds };
    else {
      plan.skipped.push({ check: c.name, reason: "neither a timeout nor a schedule" });
      continue;
    }
    taken.add(name);
    plan.planned.push({ name, oldPingUrl: c.ping_url ?? "", body, paused: c.status === "paused" });
  }
  return plan;
}
