import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { planImport, type PlannedHeartbeat } from "./healthchecks-import.js";

export const IMPORT_USAGE = `usage: WARROOM_TOKEN=<session token or personal API key> npm run admin -- import-healthchecks <export.json> --org <slug> [--url <base URL>] [--dry-run]

Registers the checks of a Healthchecks export (the answer of GET /api/v3/checks/, saved to a
file) as heartbeats of the organization, through the service's API at --url (default
WARROOM_URL, else http://localhost:8080) as the admin whose token is in WARROOM_TOKEN (never on
the command line, where other users of the machine can read it). Prints each check's old ping
URL beside its new one, tab-separated. --dry-run registers nothing and prints what it would do.
A name that exists already is left as it is and its ping URL printed.`;

interface Answer {
  status: number;
  body: { pingUrl?: string; error?: string } | null;
}

async function call(url: string, token: string, method: string, body?: unknown): Promise<Answer> {
  const res = await fetch(url, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let parsed: Answer["body"] = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { error: text };
  }
  return { status: res.status, body: parsed };
}

function cadence(p: PlannedHeartbeat): string {
  return p.body.schedule
    ? `schedule "${p.body.schedule}" (${p.body.timezone}), grace ${p.body.graceSeconds}s`
    : `every ${p.body.expectedIntervalSeconds}s, grace ${p.body.graceSeconds}s`;
}

/** The command: exit code 0 when every check was registered (or exists), 1 when one failed, 2 for usage. */
export async function runImportHealthchecks(
  args: string[],
  out: (line: string) => void = console.log,
  err: (line: string) => void = console.error,
): Promise<number> {
  const { positionals, values } = parseArgs({
    args,
    allowPositionals: true,
    options: { org: { type: "string" }, url: { type: "string" }, "dry-run": { type: "boolean" }, help: { type: "boolean" } },
  });
  const file = positionals[0];
  if (values.help || !file || !values.org) {
    err(IMPORT_USAGE);
    return values.help ? 0 : 2;
  }
  let plan: ReturnType<typeof planImport>;
  try {
    plan = planImport(JSON.parse(readFileSync(file, "utf8")));
  } catch (e) {
    err(`${file}: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
  for (const s of plan.skipped) err(`skipped "${s.check}": ${s.reason}`);
  const dryRun = values["dry-run"] === true;
  const token = process.env.WARROOM_TOKEN ?? "";
  if (!dryRun && !token) {
    err("WARROOM_TOKEN is not set: a session token or personal API key of an admin of the organization");
    return 2;
  }
  const base = (values.url ?? process.env.WARROOM_URL ?? "http://localhost:8080").replace(/\/+$/, "");
  const heartbeats = `${base}/o/${encodeURIComponent(values.org)}/heartbeats`;
  let failed = 0;
  for (const p of plan.planned) {
    if (dryRun) {
      out(`would register ${p.name} (${cadence(p)}${p.paused ? ", paused" : ""})\t${p.oldPingUrl}`);
      continue;
    }
    const made = await call(heartbeats, token, "POST", p.body);
    if (made.status === 201 && p.paused) {
      // Registered, then paused as it was there: until the job pings here, nothing alerts.
      const paused = await call(`${heartbeats}/${encodeURIComponent(p.name)}`, token, "PATCH", { paused: true });
      if (paused.status === 200) out(`${p.name}\t${p.oldPingUrl}\t${made.body?.pingUrl ?? ""}\t(paused, as it was)`);
      else {
        failed++;
        err(
          `${p.name}: registered, but pausing it failed: ${paused.status} ${paused.body?.error ?? ""}; pause it with PATCH ${heartbeats}/${p.name} {"paused": true}`,
        );
      }
    } else if (made.status === 201) {
      out(`${p.name}\t${p.oldPingUrl}\t${made.body?.pingUrl ?? ""}`);
    } else if (made.status === 409) {
      const existing = await call(`${heartbeats}/${encodeURIComponent(p.name)}`, token, "GET");
      out(`${p.name}\t${p.oldPingUrl}\t${existing.body?.pingUrl ?? ""}\t(exists already, left as it is)`);
    } else {
      failed++;
      err(`${p.name}: ${made.status} ${made.body?.error ?? ""}`);
    }
  }
  if (dryRun) err(`dry run: ${plan.planned.length} to register, ${plan.skipped.length} skipped; nothing was registered`);
  return failed > 0 ? 1 : 0;
}
