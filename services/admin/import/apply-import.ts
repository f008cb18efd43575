import type { ImportPlan, PlannedHeartbeat, PlannedSource, RuleJson } from "./import-plan.js";
import type { ServiceApi } from "./service-api.js";

/**
 * Brings the organization in line with an import plan through the service's API: a custom source
 * or heartbeat missing by its name is created, one whose rules or timing differ is updated, and
 * one that matches is left alone, so a second run changes nothing. A dry run reads and changes
 * nothing; without a token it cannot compare, and says so.
 */

export type Action = "create" | "update" | "unchanged" | "failed";

export interface SourceOutcome {
  name: string;
  from: string;
  action: Action;
  /** What differs, for an update. */
  changes: string[];
  /** Where its sender posts (`/triggers/custom/{id}`), once known. */
  url?: string;
  /** The credential of a source just created, shown this once. */
  secret?: string;
  error?: string;
}

export interface HeartbeatOutcome {
  name: string;
  from: string;
  action: Action;
  changes: string[];
  oldPingUrl: string;
  pingUrl?: string;
  paused: boolean;
  error?: string;
}

export interface ImportOutcome {
  dryRun: boolean;
  /** Whether the plan was compared with the organization (a dry run without a token is not). */
  compared: boolean;
  sources: SourceOutcome[];
  heartbeats: HeartbeatOutcome[];
}

interface RemoteSource {
  id: string;
  name: string;
  url?: string;
  rules?: Record<string, unknown>[];
  description?: string;
}

interface RemoteHeartbeat {
  name: string;
  expectedIntervalSeconds?: number;
  graceSeconds?: number;
  schedule?: string;
  pausedAt?: string;
  pingUrl?: string;
}

/** A rule with its empty fields left out, keys in one order, to compare. */
function normalRule(rule: Record<string, unknown>): string {
  const keys = ["name", "when", "kind", "title", "severity", "attachKey", "eventId", "entity", "summary", "link", "runbookUrl", "ignoreReason"];
  return JSON.stringify(keys.map((k) => [k, typeof rule[k] === "string" ? rule[k] : ""]));
}

function sourceChanges(want: PlannedSource, have: RemoteSource): string[] {
  const changes: string[] = [];
  const wanted = want.rules.map((r) => normalRule(r as unknown as Record<string, unknown>));
  const existing = (have.rules ?? []).map(normalRule);
  if (wanted.length !== existing.length || wanted.some((r, i) => r !== existing[i])) changes.push("rules");
  if ((have.description ?? "") !== want.description) changes.push("description");
  return changes;
}

function heartbeatChanges(want: PlannedHeartbeat, have: RemoteHeartbeat): string[] {
  const changes: string[] = [];
  if (have.schedule || (have.expectedIntervalSeconds ?? 0) !== want.expectedIntervalSeconds) {
    changes.push(`interval ${have.schedule ? `schedule "${have.schedule}"` : `${have.expectedIntervalSeconds ?? 0}s`} → ${want.expectedIntervalSeconds}s`);
  }
  if ((have.graceSeconds ?? 0) !== want.graceSeconds) changes.push(`grace ${have.graceSeconds ?? 0}s → ${want.graceSeconds}s`);
  const paused = Boolean(have.pausedAt);
  if (paused !== want.paused) changes.push(want.paused ? "paused, as it is there" : "resumed, as it is there");
  return changes;
}

async function listSources(api: ServiceApi): Promise<RemoteSource[]> {
  const res = await api.call<{ customSources?: RemoteSource[] }>("GET", "/custom-sources");
  if (res.status !== 200) throw new Error(`listing the custom sources failed: ${res.status} ${res.body?.error ?? ""}`);
  return res.body?.customSources ?? [];
}

async function applySource(
  api: ServiceApi | undefined,
  dryRun: boolean,
  want: PlannedSource,
  existing: Map<string, RemoteSource> | undefined,
): Promise<SourceOutcome> {
  const base = { name: want.name, from: want.from, changes: [] as string[] };
  if (!existing) return { ...base, action: "create" };
  const have = existing.get(want.name);
  if (have) {
    // Only a source this import made is changed: its description starts with where it came from.
    const origin = want.description.split("\n")[0]!;
    if (!(have.description ?? "").startsWith(origin)) {
      return {
        ...base,
        action: "failed",
        url: have.url,
        error: `a custom source named ${want.name} exists that this import did not make (its description does not start "${origin}"): left as it is; rename or delete it, then import again`,
      };
    }
    const changes = sourceChanges(want, have);
    if (changes.length === 0) return { ...base, action: "unchanged", url: have.url };
    if (dryRun || !api) return { ...base, action: "update", changes, url: have.url };
    const res = await api.call("PATCH", `/custom-sources/${encodeURIComponent(have.id)}`, { rules: want.rules, description: want.description });
    if (res.status !== 200) return { ...base, action: "failed", changes, error: `updating it failed: ${res.status} ${res.body?.error ?? ""}` };
    return { ...base, action: "update", changes, url: have.url };
  }
  if (dryRun || !api) return { ...base, action: "create" };
  const res = await api.call<{ source?: RemoteSource; credential?: { secret?: string; url?: string } }>("POST", "/custom-sources", {
    name: want.name,
    rules: want.rules,
    description: want.description,
  });
  if (res.status !== 201 && res.status !== 200) return { ...base, action: "failed", error: `creating it failed: ${res.status} ${res.body?.error ?? ""}` };
  return { ...base, action: "create", url: res.body?.credential?.url ?? res.body?.source?.url, secret: res.body?.credential?.secret };
}

async function applyHeartbeat(api: ServiceApi | undefined, dryRun: boolean, want: PlannedHeartbeat): Promise<HeartbeatOutcome> {
  const base = { name: want.name, from: want.from, changes: [] as string[], oldPingUrl: want.oldPingUrl, paused: want.paused };
  if (!api) return { ...base, action: "create" };
  const path = `/heartbeats/${encodeURIComponent(want.name)}`;
  const found = await api.call<RemoteHeartbeat>("GET", path);
  if (found.status === 200 && found.body) {
    const changes = heartbeatChanges(want, found.body);
    if (changes.length === 0) return { ...base, action: "unchanged", pingUrl: found.body.pingUrl };
    if (dryRun) return { ...base, action: "update", changes, pingUrl: found.body.pingUrl };
    const res = await api.call<RemoteHeartbeat>("PATCH", path, {
      expectedIntervalSeconds: want.expectedIntervalSeconds,
      graceSeconds: want.graceSeconds,
      paused: want.paused,
    });
    if (res.status !== 200) return { ...base, action: "failed", changes, error: `updating it failed: ${res.status} ${res.body?.error ?? ""}` };
    return { ...base, action: "update", changes, pingUrl: found.body.pingUrl };
  }
  if (found.status !== 404) return { ...base, action: "failed", error: `reading it failed: ${found.status} ${found.body?.error ?? ""}` };
  if (dryRun) return { ...base, action: "create" };
  const made = await api.call<RemoteHeartbeat>("POST", "/heartbeats", {
    name: want.name,
    expectedIntervalSeconds: want.expectedIntervalSeconds,
    graceSeconds: want.graceSeconds,
  });
  if (made.status !== 201) return { ...base, action: "failed", error: `registering it failed: ${made.status} ${made.body?.error ?? ""}` };
  if (want.paused) {
    // Registered, then paused as it was there: until the job pings here, nothing alerts.
    const paused = await api.call("PATCH", path, { paused: true });
    if (paused.status !== 200) {
      return {
        ...base,
        action: "failed",
        pingUrl: made.body?.pingUrl,
        error: `registered, but pausing it failed: ${paused.status} ${paused.body?.error ?? ""}; pause it with PATCH ${api.org}${path} {"paused": true}`,
      };
    }
  }
  return { ...base, action: "create", pingUrl: made.body?.pingUrl };
}

/** Applies the plan (or, for a dry run, only compares it). Stops at a ServiceError. */
export async function applyImport(plan: ImportPlan, api: ServiceApi | undefined, dryRun: boolean): Promise<ImportOutcome> {
  const outcome: ImportOutcome = { dryRun, compared: api !== undefined, sources: [], heartbeats: [] };
  const existing = api && plan.sources.length > 0 ? new Map((await listSources(api)).map((s) => [s.name, s])) : api ? new Map() : undefined;
  for (const source of plan.sources) outcome.sources.push(await applySource(api, dryRun, source, existing));
  for (const heartbeat of plan.heartbeats) outcome.heartbeats.push(await applyHeartbeat(api, dryRun, heartbeat));
  return outcome;
}

export function ruleSummary(rules: RuleJson[]): string {
  return rules.map((r) => r.name).join(", ");
}
