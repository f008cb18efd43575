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

/** Decoding is stateless without `stream`, so one decoder of each kind serves every body. */
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });
const LENIENT_UTF8 = new TextDecoder("utf-8", { fatal: false });

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
    text = STRICT_UTF8.decode(bytes);
  } catch {
    valid = false;
    text = LENIENT_UTF8.decode(bytes);
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
  if (nestedDeeperThan(value, MAX_JSON_DEPTH)) {
    throw new UnprocessablePayloadError(UNRECOGNIZED, `the body is nested deeper than ${MAX_JSON_DEPTH} levels`);
  }
  return value;
}

/**
 * Whether `value` nests objects and arrays deeper than `limit` levels (the body itself is the
 * first). The recursion goes no deeper than `limit` + 1 calls, however deep the value, so a hostile
 * body cannot exhaust the stack; it allocates nothing.
 */
export function nestedDeeperThan(value: unknown, limit: number): boolean {
  if (value === null || typeof value !== "object") return false;
  if (limit === 0) return true;
  if (Array.isArray(value)) {
    for (const item of value) if (nestedDeeperThan(item, limit - 1)) return true;
    return false;
  }
  for (const key in value) {
    if (Object.hasOwn(value, key) && nestedDeeperThan((value as Record<string, unknown>)[key], limit - 1)) return true;
  }
  return false;
}

export { UNRECOGNIZED };
