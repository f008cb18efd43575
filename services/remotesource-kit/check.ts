import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { createSourceClient, type SourceCredentials } from "./client/source-client.js";
import { runConformanceCheck, type ConformanceResult } from "./conformance.js";
import { createAddressPolicy } from "../runtime/egress/index.js";

/**
 * The conformance check as a command, for whoever hosts a source:
 *
 *   SOURCE_TOKEN=T npx tsx services/remotesource-kit/check.ts <url> [--grpc] [--tenant REF]
 *       [--token-file FILE] [--cert client.pem --key client-key.pem] [--ca ca.pem] [--expr EXPR] [--query QUERY] [--json]
 *
 * The bearer token comes from the SOURCE_TOKEN variable or a file, never from the command line:
 * npm prints a script's command line, and process listings show it to every user.
 *
 * Runs the same checks as Test connection in the service and exits 0 only when all pass.
 */

const USAGE = `usage: [SOURCE_TOKEN=T] check.ts <url> [--token-file FILE] [--grpc] [--tenant REF] [--cert FILE --key FILE] [--ca FILE] [--expr EXPR] [--query QUERY] [--json]`;

function parseCheckArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      token: { type: "string" },
      "token-file": { type: "string" },
      grpc: { type: "boolean", default: false },
      tenant: { type: "string", default: "conformance-check" },
      cert: { type: "string" },
      key: { type: "string" },
      ca: { type: "string" },
      expr: { type: "string" },
      query: { type: "string" },
      json: { type: "boolean", default: false },
    },
  });
}

/**
 * The `check-source` command: runs the conformance check against a source URL with the token from
 * the environment or a file, and answers the exit code and the report to print.
 */
export async function checkCommand(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ exitCode: number; output: string }> {
  let parsed: ReturnType<typeof parseCheckArgs>;
  try {
    parsed = parseCheckArgs(argv);
  } catch (err) {
    return { exitCode: 2, output: `${err instanceof Error ? err.message : String(err)}\n${USAGE}` };
  }
  const { values, positionals } = parsed;
  const url = positionals[0];
  if (!url || positionals.length > 1) return { exitCode: 2, output: USAGE };
  if (Boolean(values.cert) !== Boolean(values.key)) return { exitCode: 2, output: `--cert and --key go together\n${USAGE}` };
  if (values.token !== undefined) {
    return { exitCode: 2, output: `--token would put the token in the command line (and npm echoes it): set SOURCE_TOKEN or use --token-file\n${USAGE}` };
  }
  const fromFile = values["token-file"] ? readFileSync(values["token-file"], "utf8").trim() : undefined;
  const credentials: SourceCredentials = {
    bearerToken: fromFile || env.SOURCE_TOKEN || undefined,
    clientCertPem: values.cert ? readFileSync(values.cert, "utf8") : undefined,
    clientKeyPem: values.key ? readFileSync(values.key, "utf8") : undefined,
    caPem: values.ca ? readFileSync(values.ca, "utf8") : undefined,
  };
  // The author checks their own source, often on this machine: every address may be reached.
  const policy = createAddressPolicy({ allowPrivateCidrs: ["127.0.0.0/8", "::1/128", "0.0.0.0/0", "::/0"], requireHttps: false, allowPrivateByDefault: true });
  const client = createSourceClient(
    { baseUrl: url, transport: values.grpc ? "grpc" : "http", tenantRef: values.tenant ?? "conformance-check", credentials },
    { policy },
  );
  const result = await runConformanceCheck(client, {
    ...(values.expr === undefined ? {} : { expr: values.expr }),
    ...(values.query === undefined ? {} : { query: values.query }),
  });
  return { exitCode: result.ok ? 0 : 1, output: values.json ? JSON.stringify(result, null, 2) : formatReport(url, values.grpc ? "gRPC" : "HTTP-JSON", result) };
}

/**
 * The conformance result as the command prints it: each check with PASS or FAIL, its rule when it
 * failed, its warnings, and a summary.
 */
export function formatReport(url: string, transport: string, result: ConformanceResult): string {
  const lines = [`Conformance check of ${url} over ${transport} (protocol version ${result.protocolVersion || "unknown"})`, ""];
  for (const check of result.checks) {
    lines.push(`${check.ok ? "PASS" : "FAIL"}  ${check.name}: ${check.detail}`);
    if (!check.ok) lines.push(`      rule: ${check.rule}`);
    for (const warning of check.warnings) lines.push(`      warning: ${warning}`);
  }
  const failed = result.checks.filter((c) => !c.ok).length;
  lines.push(
    "",
    result.ok
      ? "All checks passed: the service will mark this source connected."
      : `${failed} check(s) failed: the service will not mark this source connected.`,
  );
  return lines.join("\n");
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const { exitCode, output } = await checkCommand(process.argv.slice(2));
  console.log(output);
  process.exit(exitCode);
}
