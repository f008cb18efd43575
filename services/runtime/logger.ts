import { pino, type Logger } from "pino";
import { currentRequestId } from "./request-context.js";
import { logFields } from "./tracing.js";

export type { Logger };

/**
 * The process's pino logger, whose every line names the request id (and trace and span) of the call
 * it is written in.
 */
export function createLogger(level: string, name: string): Logger {
  return pino({
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
    // Credentials never reach the logs, whatever a caller passes in.
    redact: {
      paths: ["authorization", "*.authorization", "token", "*.token", "secret", "*.secret", "password", "*.password", "webhookUrl", "*.webhookUrl"],
      censor: "[redacted]",
    },
  });
}
