import { InvalidArgumentError } from "../runtime/errors.js";
import { isOneOf, SEVERITIES } from "./vocabulary.js";

/** Bounds of a policy: steps per severity, and a step's minutes after opening (a week at most). */
export const ESCALATION_LIMITS = { steps: 10, minMinutes: 1, maxMinutes: 10080 } as const;

/** One severity's acknowledgement deadlines, minutes after opening, strictly ascending. */
export interface EscalationSteps {
  severity: string;
  minutes: number[];
}

/**
 * Checks a whole policy and answers it sev1 first, without severities that have no step. The
 * messages name the severity and what to change, for the API and for config as code alike.
 */
export function checkEscalationPolicy(severities: readonly EscalationSteps[]): EscalationSteps[] {
  const seen = new Set<string>();
  for (const { severity, minutes } of severities) {
    if (!isOneOf(SEVERITIES, severity)) throw new InvalidArgumentError(`severity "${String(severity).slice(0, 20)}" is not one of ${SEVERITIES.join(", ")}`);
    if (seen.has(severity)) throw new InvalidArgumentError(`${severity} is given twice: give each severity's minutes once`);
    seen.add(severity);
    if (minutes.length > ESCALATION_LIMITS.steps) {
      throw new InvalidArgumentError(`${severity} has ${minutes.length} steps; at most ${ESCALATION_LIMITS.steps} are allowed`);
    }
    minutes.forEach((m, i) => {
      if (!Number.isInteger(m) || m < ESCALATION_LIMITS.minMinutes || m > ESCALATION_LIMITS.maxMinutes) {
        throw new InvalidArgumentError(
          `${severity} step ${i + 1}: ${m} minutes is outside ${ESCALATION_LIMITS.minMinutes} to ${ESCALATION_LIMITS.maxMinutes} (a week)`,
        );
      }
      if (i > 0 && m <= minutes[i - 1]!) {
        throw new InvalidArgumentError(
          `${severity} step ${i + 1}: ${m} minutes is not after step ${i} (${minutes[i - 1]}); list the minutes in ascending order`,
        );
      }
    });
  }
  return SEVERITIES.flatMap((severity) => {
    const found = severities.find((s) => s.severity === severity);
    return found && found.minutes.length > 0 ? [{ severity, minutes: [...found.minutes] }] : [];
  });
}
