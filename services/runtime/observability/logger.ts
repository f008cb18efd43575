import { pino, type DestinationStream, type Logger } from "pino";
import { currentRequestId } from "../http/request-context.js";
import { logFields } from "./tracing.js";

export type { Logger };

/** Keys pino writes on every line itself. */
const CORE_KEYS = ["level", "time", "pid", "hostname", "name", "msg"];

/**
 * A field whose key pino or the logger's bindings already write is kept under `field_<key>`: a
 * line with a key twice reads, in jq or Python, as one of them only, and the other is lost.
 */
function withoutTakenKeys(fields: Record<string, unknown>, taken: ReadonlySet<string>): Record<string, unknown> {
  if (!Object.keys(fields).some((key) => taken.has(key))) return fields;
  const renamed: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    let name = taken.has(key) ? `field_${key}` : key;
    while (name !== key && (name in fields || taken.has(name))) name = `field_${name}`;
    renamed[name] = value;
  }
  return renamed;
}

const { chindingsSym } = pino.symbols;

/**
 * pino writes a child's bindings after its parent's, so a key bound twice (a service's
 * `child({ service })` under the process's own) appears twice on every line. A child made here
 * replaces the parent's binding of a key it binds again, and keeps a binding named like one of
 * pino's own keys under `field_<key>`, as the log calls' fields are kept.
 */
function withUniqueBindings(logger: Logger): Logger {
  const child = logger.child;
  function uniqueChild(this: Logger, bindings: Record<string, unknown>, options?: Parameters<Logger["child"]>[1]): Logger {
    const own: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(bindings)) own[CORE_KEYS.includes(key) ? `field_${key}` : key] = value;
    const instance = child.call(this, {}, options) as unknown as Logger;
    // The parent's bindings as written (serialized and redacted already), minus those bound again.
    const written = instance as unknown as Record<symbol, string>;
    const parent = JSON.parse(`{${written[chindingsSym]!.slice(1)}}`) as Record<string, unknown>;
    written[chindingsSym] = Object.entries(parent)
      .filter(([key]) => !(key in own))
      .map(([key, value]) => `,${JSON.stringify(key)}:${JSON.stringify(value)}`)
      .join("");
    instance.setBindings(own);
    return instance;
  }
  logger.child = uniqueChild as unknown as Logger["child"];
  return logger;
}

/**
 * The process's pino logger, whose every line names the request id (and trace and span) of the call
 * it is written in, with each key once (its children's bindings included). `destination` is stdout unless given (tests).
 */
export function createLogger(level: string, name: string, destination?: DestinationStream): Logger {
  const logger = pino(
    {
      name,
      level,
      // Every line written while serving a call names its request id, across processes.
      // Inside a span (tracing on), it names the trace and span too.
      mixin: () => {
        const requestId = currentRequestId();
        const ids = logFields();
        if (ids) return requestId ? { requestId, ...ids } : ids;
        return requestId ? { requestId } : {};
      },
      hooks: {
        logMethod(args, method) {
          const [first, ...rest] = args as unknown[];
          if (first && typeof first === "object" && !(first instanceof Error)) {
            const taken = new Set([...CORE_KEYS, ...Object.keys(this.bindings())]);
            return method.apply(this, [withoutTakenKeys(first as Record<string, unknown>, taken), ...rest] as Parameters<typeof method>);
          }
          return method.apply(this, args);
        },
      },
      // Credentials never reach the logs, whatever a caller passes in; nor the input of an invalid
      // URL (a connection string with its password).
      redact: {
        paths: [
          "authorization",
          "*.authorization",
          "token",
          "*.token",
          "secret",
          "*.secret",
          "password",
          "*.password",
          "webhookUrl",
          "*.webhookUrl",
          "err.input",
        ],
        censor: "[redacted]",
      },
    },
    destination,
  );
  return withUniqueBindings(logger);
}
