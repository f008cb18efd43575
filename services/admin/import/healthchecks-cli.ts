import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { baseUrlOf, NO_TOKEN, ServiceError, serviceApi } from "./service-api.js";
import { planImport, type PlannedHeartbeat } from "./healthchecks.js";

export const IMPORT_USAGE = `usage: WARROOM_TOKEN=<session token or personal API key> npm run admin -- import-healthchecks <export.json> --org <slug> [--url <base URL>] [--dry-run]

Registers the checks of a Healthchecks export (the answer of GET /api/v3/checks/, saved to a
file) as heartbeats of the organization, through the service's API at --url (default
WARROOM_URL, else http://localhost:8080) as the admin whose token is in WARROOM_TOKEN (never on
the command line, where other users of the machine can read it). Prints each check's old ping
URL beside its new one, tab-separated. --dry-run registers nothing and prints what it would do.
A name that exists already is left as it is and its ping URL printed.`;

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
    err(NO_TOKEN);
    return 2;
  }
  const api = serviceApi(baseUrlOf(values.url), values.org, token);
  let failed: number;
  try {
    failed = await register(plan.planned, api, dryRun, out, err);
  } catch (e) {
    if (!(e instanceof ServiceError)) throw e;
    err(e.message);
    return 1;
  }
  if (dryRun) err(`dry run: ${plan.planned.length} to register, ${plan.skipped.length} skipped; nothing was registered`);
  return failed > 0 ? 1 : 0;
}

/** Registers each planned check; the number that failed. Throws ServiceError when the service cannot be used. */
async function register(
  planned: PlannedHeartbeat[],
  api: ReturnType<typeof serviceApi>,
  dryRun: boolean,
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<number> {
  const heartbeats = `${api.org}/heartbeats`;
  let failed = 0;
  for (const p of planned) {
    if (dryRun) {
      out(`would register ${p.name} (${cadence(p)}${p.paused ? ", paused" : ""})\t${p.oldPingUrl}`);
      continue;
    }
    const made = await api.call<{ pingUrl?: string }>("POST", "/heartbeats", p.body);
    if (made.status === 201 && p.paused) {
      // Registered, then paused as it was there: until the job pings here, nothing alerts.
      const paused = await api.call("PATCH", `/heartbeats/${encodeURIComponent(p.name)}`, { paused: true });
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
      const existing = await api.call<{ pingUrl?: string }>("GET", `/heartbeats/${encodeURIComponent(p.name)}`);
      out(`${p.name}\t${p.oldPingUrl}\t${existing.body?.pingUrl ?? ""}\t(exists already, left as it is)`);
    } else {
      failed++;
      err(`${p.name}: ${made.status} ${made.body?.error ?? ""}`);
    }
  }
  return failed;
}
