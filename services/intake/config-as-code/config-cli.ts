import { readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";

export const CONFIG_USAGE = `usage: npm run admin -- export --org <slug> [--out <file>]
       npm run admin -- apply <file> --org <slug> [--dry-run]

Talks to a running service at WARROOM_URL (default http://localhost:8080) with WARROOM_TOKEN (an
admin's session token or API key). export writes the organization's custom sources, grouping
overrides, heartbeats and maintenance windows as YAML (no secrets) to --out or stdout. apply prints the plan of creates, updates and
deletes, then applies it unless --dry-run; applying the same file again changes nothing. The
credentials of sources it creates are printed once.`;

/** `npm run admin -- export|apply`: configuration as code over the service's own routes. */
export async function runConfigCommand(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { org: { type: "string" }, out: { type: "string" }, "dry-run": { type: "boolean" }, help: { type: "boolean" } },
  });
  const [command, file] = positionals;
  const token = process.env.WARROOM_TOKEN;
  if (values.help || !values.org || !token || (command === "apply" && !file)) {
    console.error(CONFIG_USAGE);
    if (!token && !values.help) console.error("WARROOM_TOKEN is not set.");
    return values.help ? 0 : 2;
  }
  const base = (process.env.WARROOM_URL ?? "http://localhost:8080").replace(/\/+$/, "");
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  const path = `${base}/o/${encodeURIComponent(values.org)}/config`;
  if (command === "export") {
    const res = await fetch(path, { headers });
    const body = (await res.json()) as { yaml?: string; error?: string };
    if (!res.ok || body.yaml === undefined) {
      console.error(`export failed: ${res.status} ${body.error ?? ""}`);
      return 1;
    }
    if (values.out) writeFileSync(values.out, body.yaml);
    else process.stdout.write(body.yaml);
    return 0;
  }
  const yaml = readFileSync(file!, "utf8");
  const res = await fetch(path, { method: "POST", headers, body: JSON.stringify({ yaml, dryRun: values["dry-run"] ?? false }) });
  const body = (await res.json()) as {
    changes?: { action: string; kind: string; name: string }[];
    credentials?: { name: string; credential: { secret: string; url: string; pathUrl: string | null } }[];
    applied?: boolean;
    error?: string;
  };
  if (!res.ok) {
    console.error(`apply failed: ${res.status} ${body.error ?? ""}`);
    return 1;
  }
  const changes = body.changes ?? [];
  if (changes.length === 0) console.log("no changes: the organization matches the file");
  for (const change of changes) console.log(`${change.action} ${change.kind} ${change.name}`);
  if (values["dry-run"]) console.log("dry run: nothing changed");
  else if (body.applied) console.log(`applied ${changes.length} change(s)`);
  for (const created of body.credentials ?? []) {
    console.log(`credential of ${created.name} (shown once): ${created.credential.secret} for ${created.credential.url}`);
  }
  return 0;
}
