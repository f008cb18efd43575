import { readFileSync, statSync } from "node:fs";
import { parseArgs } from "node:util";
import { applyImport, type ImportOutcome } from "./apply-import.js";
import { ExportShapeError, type ImportPlan, parseDocuments } from "./import-plan.js";
import { planOnCallImport } from "./oncall.js";
import { planOpsgenieImport } from "./opsgenie.js";
import { baseUrlOf, NO_TOKEN, ServiceError, serviceApi, tokenFromEnvironment } from "./service-api.js";

export const IMPORT_TOOLS_USAGE = `usage: WARROOM_TOKEN=<session token or personal API key> npm run admin -- import oncall|opsgenie <file> --org <slug> [--url <base URL>] [--dry-run] [--json]

oncall:   the answer of Grafana OnCall's GET /api/v1/integrations/ saved to a file (one page, or
          several one after another). Each integration becomes a custom source whose rules are
          translated from its templates where they can be (payload paths, | default, if/else,
          ==, !=, and, or, not); each integration heartbeat with a timeout_seconds becomes a
          heartbeat.
opsgenie: the answers of Opsgenie's GET /v2/heartbeats, GET /v2/integrations and
          GET /v2/integrations/{id} saved to one file. Each heartbeat becomes a heartbeat (a
          disabled one paused); each API integration a custom source taking the create-alert body.

Through the service's API at --url (default WARROOM_URL, else http://localhost:8080) as the admin
whose token is in WARROOM_TOKEN (never on the command line). What exists under the same name is
compared and updated only where it differs, so a second run changes nothing. Every template that
could not be translated is reported, and every template is kept word for word in its source's
description. --dry-run changes nothing and says what it would do (with a token, compared with the
organization). --json prints the result as one JSON object.`;

/** The largest export read: a few thousand integrations are a few MiB. */
const MAX_FILE_BYTES = 32 * 1024 * 1024;

const PLANNERS: Record<string, (documents: unknown[]) => ImportPlan> = { oncall: planOnCallImport, opsgenie: planOpsgenieImport };

function verb(action: string, dryRun: boolean): string {
  if (action === "unchanged" || action === "failed") return action;
  const words: Record<string, [string, string]> = { create: ["created", "would create"], update: ["updated", "would update"] };
  return words[action]![dryRun ? 1 : 0];
}

function printText(plan: ImportPlan, outcome: ImportOutcome, out: (line: string) => void, err: (line: string) => void): void {
  for (const s of outcome.sources) {
    const planned = plan.sources.find((p) => p.name === s.name)!;
    const parts = [`source ${s.name}`, verb(s.action, outcome.dryRun), s.from];
    if (s.changes.length > 0) parts.push(`(${s.changes.join(", ")})`);
    if (s.url) parts.push(s.url);
    if (s.secret) parts.push(`secret ${s.secret} (shown this once)`);
    out(parts.join("\t"));
    if (s.error) err(`source ${s.name}: ${s.error}`);
    for (const note of planned.notes) out(`  note: ${note}`);
  }
  for (const h of outcome.heartbeats) {
    const planned = plan.heartbeats.find((p) => p.name === h.name)!;
    const timing = `every ${planned.expectedIntervalSeconds}s, grace ${planned.graceSeconds}s${h.paused ? ", paused" : ""}`;
    const parts = [`heartbeat ${h.name}`, verb(h.action, outcome.dryRun), `(${timing})`];
    if (h.changes.length > 0) parts.push(`(${h.changes.join(", ")})`);
    parts.push(h.oldPingUrl || "-", h.pingUrl ?? "-");
    out(parts.join("\t"));
    if (h.error) err(`heartbeat ${h.name}: ${h.error}`);
    for (const note of planned.notes) out(`  note: ${note}`);
  }
  for (const s of plan.skipped) err(`skipped ${s.item}: ${s.reason}`);
  const untranslated = plan.sources.flatMap((s) => s.untranslated.map((u) => ({ source: s.name, ...u })));
  if (untranslated.length > 0) {
    out("");
    out(`not translated (${untranslated.length}; each kept word for word in its source's description):`);
    for (const u of untranslated) {
      out(`  ${u.source} ${u.template}: ${u.reason}`);
      for (const line of u.text.split("\n").slice(0, 5)) out(`    | ${line}`);
      if (u.text.split("\n").length > 5) out("    | …");
    }
  }
  const count = (action: string) => [...outcome.sources, ...outcome.heartbeats].filter((x) => x.action === action).length;
  const summary = `${count("create")} ${outcome.dryRun ? "to create" : "created"}, ${count("update")} ${outcome.dryRun ? "to update" : "updated"}, ${count("unchanged")} unchanged, ${count("failed")} failed, ${plan.skipped.length} skipped`;
  err(
    outcome.dryRun
      ? `dry run: ${summary}; nothing was changed${outcome.compared ? "" : " (not compared with the organization: WARROOM_TOKEN is not set)"}`
      : summary,
  );
}

function parseOptions(args: string[]) {
  return parseArgs({
    args,
    allowPositionals: true,
    options: { org: { type: "string" }, url: { type: "string" }, "dry-run": { type: "boolean" }, json: { type: "boolean" }, help: { type: "boolean" } },
  });
}

/** The command: 0 when everything was imported (or is already), 1 when something failed, 2 for usage. */
export async function runImportTool(args: string[], out: (line: string) => void = console.log, err: (line: string) => void = console.error): Promise<number> {
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions(args);
  } catch (e) {
    err(`${e instanceof Error ? e.message : String(e)}\n\n${IMPORT_TOOLS_USAGE}`);
    return 2;
  }
  const { positionals, values } = parsed;
  const [tool, file] = positionals;
  const planner = tool ? PLANNERS[tool] : undefined;
  if (values.help || !planner || !file || !values.org) {
    if (tool && !planner && !values.help) err(`unknown tool "${tool}": oncall or opsgenie`);
    err(IMPORT_TOOLS_USAGE);
    return values.help ? 0 : 2;
  }
  const dryRun = values["dry-run"] === true;
  let plan: ImportPlan;
  try {
    const size = statSync(file).size;
    if (size > MAX_FILE_BYTES) throw new ExportShapeError(`${size} bytes is more than the ${MAX_FILE_BYTES / 1024 / 1024} MiB read: split the export`);
    plan = planner(parseDocuments(readFileSync(file, "utf8")));
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === "ENOENT") err(`${file}: no such file`);
    else err(`${file}: ${e instanceof Error ? e.message : String(e)}`);
    if (!(e instanceof ExportShapeError) && code !== "ENOENT" && !(e instanceof SyntaxError)) throw e;
    return 1;
  }
  const token = tokenFromEnvironment();
  if (!dryRun && !token) {
    err(NO_TOKEN);
    return 2;
  }
  const api = token ? serviceApi(baseUrlOf(values.url), values.org, token) : undefined;
  let outcome: ImportOutcome;
  try {
    outcome = await applyImport(plan, api, dryRun);
  } catch (e) {
    if (e instanceof ServiceError) {
      err(e.message);
      return 1;
    }
    throw e;
  }
  if (values.json) {
    out(
      JSON.stringify({
        tool: plan.tool,
        dryRun,
        compared: outcome.compared,
        sources: outcome.sources.map((s) => {
          const p = plan.sources.find((x) => x.name === s.name)!;
          return { ...s, rules: p.rules, notes: p.notes, untranslated: p.untranslated };
        }),
        heartbeats: outcome.heartbeats.map((h) => {
          const p = plan.heartbeats.find((x) => x.name === h.name)!;
          return { ...h, expectedIntervalSeconds: p.expectedIntervalSeconds, graceSeconds: p.graceSeconds, notes: p.notes };
        }),
        untranslated: plan.sources.flatMap((s) => s.untranslated.map((u) => ({ source: s.name, ...u }))),
        skipped: plan.skipped,
      }),
    );
  } else printText(plan, outcome, out, err);
  return [...outcome.sources, ...outcome.heartbeats].some((x) => x.action === "failed") ? 1 : 0;
}
