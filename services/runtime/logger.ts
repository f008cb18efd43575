import { pino, type Logger } from "pino";

export type { Logger };

export function createLogger(level: string, name: string): Logger {
  return pino({
    name,
    level,
    // Credentials never reach the logs, whatever a caller passes in.
    redact: {
      paths: ["authorization", "*.authorization", "token", "*.token", "secret", "*.secret", "password", "*.password", "webhookUrl", "*.webhookUrl"],
      censor: "[redacted]",
    },
  });
}
