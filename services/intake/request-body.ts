import { InvalidArgumentError, UnprocessablePayloadError } from "../runtime/errors.js";

/** A body that is not valid UTF-8: 400, whatever the route. */
export class InvalidUtf8Error extends InvalidArgumentError {
  constructor() {
    super("the body is not valid UTF-8");
  }
}

/** Deeper nesting than any real sender uses; past it a body is refused before it is walked. */
export const MAX_JSON_DEPTH = 64;

const UNRECOGNIZED = "Unrecognized trigger payload";

/**
 * Reads a trigger body. Senders declare JSON in different ways (SNS posts JSON as text/plain), so
 * any body that parses as JSON is read as JSON; form bodies are read as fields for the receivers
 * that accept them. Keys such as `__proto__` stay plain own properties: JSON.parse never assigns
 * prototypes, and the mappers read own properties only.
 */
export function parseTriggerBody(bytes: Uint8Array, contentType: string, options: { allowForm: boolean }): unknown {
  let valid = true;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    valid = false;
    text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  }
  const type = contentType.split(";")[0]!.trim().toLowerCase();
  if (options.allowForm && type === "application/x-www-form-urlencoded") return new URLSearchParams(text);
  if (text.trim() === "") throw new UnprocessablePayloadError(UNRECOGNIZED, "the body is empty");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    if (options.allowForm && /^[^{[\s][^=&]*=/.test(text)) return new URLSearchParams(text);
    throw new UnprocessablePayloadError(UNRECOGNIZED, "the body is not valid JSON");
  }
  // JSON whose strings are not UTF-8: refused, never stored with U+FFFD in their place.
  if (!valid) throw new InvalidUtf8Error();
  if (jsonDepth(value) > MAX_JSON_DEPTH) {
    throw new UnprocessablePayloadError(UNRECOGNIZED, `the body is nested deeper than ${MAX_JSON_DEPTH} levels`);
  }
  return value;
}

/** Depth without recursion, so a hostile body cannot exhaust the stack. */
export function jsonDepth(root: unknown): number {
  let max = 0;
  const stack: [unknown, number][] = [[root, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (value === null || typeof value !== "object") continue;
    if (depth > max) max = depth;
    if (max > MAX_JSON_DEPTH) return max;
    for (const child of Object.values(value)) stack.push([child, depth + 1]);
  }
  return max;
}

export { UNRECOGNIZED };
