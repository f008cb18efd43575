import { configSchema } from "./config.js";
import { editDistance } from "./edit-distance.js";

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
      // Names further apart in length than `allowed` are further apart than that in edits too:
      // not measured, so a process's start does not pay for every variable of its environment.
      if (Math.abs(candidate.length - upper.length) > allowed) continue;
      const distance = editDistance(upper, candidate);
      if (distance < best) [best, closest] = [distance, candidate];
    }
    if (closest && best <= allowed) warnings.push(`unknown variable ${name}: did you mean ${closest}?`);
    else if (CONFIG_PREFIXES.some((prefix) => upper.startsWith(prefix)))
      warnings.push(`unknown variable ${name}: the service reads no such variable (docs/reference/configuration.md lists those it reads)`);
  }
  return warnings;
}
