import { configSchema } from "./config.js";

/**
 * The name families the service's variables use. A variable of one of these families that the
 * service does not read is a mistake (a typo, a variable from another version); generic ones
 * (HTTP_, LOG_) are left out, as other programs' variables share them (HTTP_PROXY).
 */
export const CONFIG_PREFIXES = [
  "NATS_",
  "DATABASE_",
  "SECRETS_",
  "BOOTSTRAP_",
  "SUBSCRIPTION_",
  "INTAKE_",
  "GATEWAY_",
  "REMOTE_SOURCE_",
  "EGRESS_",
  "HEARTBEAT_",
  "LIVENESS_",
  "CHAT_WEBHOOK_",
  "METRICS_",
  "HTTP2_",
] as const;

/** Variables Kubernetes sets for each Service in the namespace (service links), e.g. NATS_SERVICE_HOST, NATS_PORT_4222_TCP. */
const SERVICE_LINK = /_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$/;

/** Edits (insert, delete, substitute, swap two neighbours) from a to b. */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * One warning per variable in `env` that the service does not read although its name says it is
 * meant for it: one of CONFIG_PREFIXES, or a name a typo away from a known one (DATABSE_URL).
 * Never the values: they may be credentials.
 */
export function unknownVariableWarnings(env: NodeJS.ProcessEnv, known: readonly string[] = Object.keys(configSchema.shape)): string[] {
  const knownSet = new Set(known);
  const warnings: string[] = [];
  for (const name of Object.keys(env).sort()) {
    if (knownSet.has(name) || SERVICE_LINK.test(name)) continue;
    const upper = name.toUpperCase();
    // Short names are a typo away from too much (HOME, HOST): only longer ones are compared.
    const allowed = upper.length >= 8 ? 2 : upper.length >= 5 ? 1 : 0;
    let closest: string | undefined;
    let best = Number.POSITIVE_INFINITY;
    for (const candidate of known) {
      const distance = editDistance(upper, candidate);
      if (distance < best) [best, closest] = [distance, candidate];
    }
    if (closest && best <= allowed) warnings.push(`unknown variable ${name}: did you mean ${closest}?`);
    else if (CONFIG_PREFIXES.some((prefix) => upper.startsWith(prefix)))
      warnings.push(`unknown variable ${name}: the service reads no such variable (README.md lists those it reads)`);
  }
  return warnings;
}
