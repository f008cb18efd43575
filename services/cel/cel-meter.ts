import { isCelList, isCelMap } from "@bufbuild/cel";

/** The bounds of every metered CEL evaluation, whatever its cost budget; documented in docs/SECURITY.md. */
export const SANDBOX_LIMITS = {
  /** Characters of a string an expression may read or build: 64 KiB. */
  stringCharacters: 64 * 1024,
  /**
   * Wall-clock time one evaluation may take, checked in the meter: the last line of defence, should
   * a cost ever be set too low. The budget ends hostile expressions in tens of milliseconds; this
   * is kept well above that, as on a loaded machine a rule set that costs a millisecond of CPU can
   * take a hundred of wall-clock time, and must not be failed for it.
   */
  evaluationMs: 1_000,
  /** Characters of a regular expression `matches` compiles. */
  patternCharacters: 256,
} as const;

/** Thrown when an evaluation has spent its budget or its time: it ends the whole evaluation. */
export class BudgetExceeded extends Error {
  override name = "BudgetExceeded";
}

// Evaluation is synchronous, so the meter of the evaluation in progress can live here: nothing
// else runs until it returns.
let remaining = 0;
let budget = 0;
let deadline = 0;
let stopped: string | undefined;
let charges = 0;

/** Starts metering one evaluation: `costBudget` units and `SANDBOX_LIMITS.evaluationMs`. */
export function startMeter(costBudget: number): void {
  remaining = costBudget;
  budget = costBudget;
  deadline = performance.now() + SANDBOX_LIMITS.evaluationMs;
  stopped = undefined;
  charges = 0;
}

/** What the evaluation in progress, or the last one, has charged: units and how many charges. */
export function meterUsage(): { budget: number; spent: number; charges: number } {
  return { budget, spent: budget - remaining, charges };
}

/** Why the evaluation in progress was stopped, if it was. */
export function meterStopped(): string | undefined {
  return stopped;
}

/** Units left in the evaluation in progress. */
export function unitsLeft(): number {
  return remaining;
}

/**
 * Charges `units` to the evaluation in progress, before the work they pay for; past the budget or
 * the time bound, the evaluation stops, and every later charge refuses too.
 */
export function chargeUnits(units: number): void {
  remaining -= units;
  charges++;
  if (stopped === undefined) {
    if (remaining < 0) stopped = `cost budget of ${budget} exceeded`;
    // Reading the clock at every call would cost more than many calls do.
    else if (((charges & 15) === 0 || units >= 64) && performance.now() > deadline)
      stopped = `evaluation ran past its time bound of ${SANDBOX_LIMITS.evaluationMs} ms`;
  }
  if (stopped !== undefined) throw new BudgetExceeded(stopped);
}

/** Units of a string or bytes of `length`: one per 64 characters or bytes. */
export function lengthUnits(length: number): number {
  return length >> 6;
}

/** The units a value's own size costs a function that reads it once: strings and bytes by length. */
export function inputUnits(value: unknown): number {
  if (typeof value === "string" || value instanceof Uint8Array) return lengthUnits(value.length);
  return 0;
}

/**
 * What walking a value costs: one unit per list element and map entry, plus its strings' units,
 * counted without recursion and only up to `cap` (the walk stops as soon as it is past it).
 */
export function walkUnits(value: unknown, cap: number): number {
  let units = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0 && units <= cap) {
    const next = stack.pop();
    if (typeof next === "string" || next instanceof Uint8Array) units += lengthUnits(next.length);
    else if (isCelList(next)) {
      units += next.size;
      if (units <= cap) for (const element of next) stack.push(element);
    } else if (isCelMap(next)) {
      units += next.size;
      if (units <= cap) for (const [key, entry] of next) stack.push(key, entry);
    }
  }
  return units;
}
