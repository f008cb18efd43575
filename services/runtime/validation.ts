import type { DescField, DescMessage, MessageShape } from "@bufbuild/protobuf";
import { createValidator, ValidationError, type Violation, violationsToProto } from "@bufbuild/protovalidate";
import { RE2JS } from "@bufbuild/re2";
import { createValidateInterceptor } from "@connectrpc/validate";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { InvalidArgumentError } from "./errors.js";
import { rulesOf } from "./schema-rules.js";

/**
 * The rules written in the schema (protovalidate: `string.in`, `max_len`, `uuid`, ...) are checked
 * here, and only here: one interceptor on every server surface (Connect, gRPC, the REST gateway's
 * internal calls over NATS or in process), and `checkRequest` for a message a handler receives
 * inside another (each delivery of a RecordMany). A violation answers InvalidArgument in our own
 * words, naming the field as the JSON does ("alert.severity must be one of sev1, ...").
 */

const validator = createValidator({ regexMatch: rememberedRegexMatch() });

/**
 * protovalidate's own matcher (RE2, which its `pattern` rules are written for) behind a memo of its
 * answers: the schema's patterns see the same few values over and over (an alert's source badge is
 * one of a dozen names), and matching one in JavaScript's RE2 cost about 4 µs of every delivery.
 * Only values up to 256 characters are remembered, and 1,024 answers at most a pattern.
 */
function rememberedRegexMatch(): (pattern: string, value: string) => boolean {
  const compiled = new Map<string, { regex: RE2JS; answers: Map<string, boolean> }>();
  return (pattern, value) => {
    let entry = compiled.get(pattern);
    if (!entry) {
      // Patterns come from the schema, a fixed set; the bound only guards against a surprise.
      if (compiled.size >= 1024) compiled.clear();
      entry = { regex: RE2JS.compile(pattern), answers: new Map() };
      compiled.set(pattern, entry);
    }
    if (value.length > 256) return entry.regex.test(value);
    let answer = entry.answers.get(value);
    if (answer === undefined) {
      answer = entry.regex.test(value);
      if (entry.answers.size >= 1024) entry.answers.clear();
      entry.answers.set(value, answer);
    }
    return answer;
  };
}

/** Throws InvalidArgument, in our words, unless the message satisfies its schema's rules. */
export function checkRequest<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): void {
  const result = validator.validate(schema, message);
  if (result.kind === "valid") return;
  if (result.kind === "invalid") throw new InvalidArgumentError(violationsWording(result.error.violations));
  throw result.error;
}

/**
 * Checks each request against its schema's rules before the handler runs; answers InvalidArgument
 * in our words. A unary request is checked in line, adding no promise to the call (the interceptor
 * runs twice a delivery); a stream's messages are checked by Connect's interceptor as they arrive.
 */
export function validationInterceptor(): Interceptor {
  const validateStream = createValidateInterceptor({ validator });
  return (next) => {
    const streamed = validateStream(next);
    return (req) => {
      if (req.stream) return streamed(req).catch(inOurWords);
      const result = validator.validate(req.method.input, req.message);
      if (result.kind === "valid") return next(req);
      if (result.kind === "invalid") throw invalidInOurWords(result.error);
      throw new ConnectError(result.error.message, Code.InvalidArgument, undefined, undefined, result.error);
    };
  };
}

function inOurWords(err: unknown): never {
  if (err instanceof ConnectError && err.cause instanceof ValidationError) throw invalidInOurWords(err.cause);
  throw err;
}

function invalidInOurWords(error: ValidationError): ConnectError {
  const [violations, schema] = violationsToProto(error.violations);
  return new ConnectError(violationsWording(error.violations), Code.InvalidArgument, undefined, [{ desc: schema, value: violations }], error);
}

function violationsWording(violations: readonly Violation[]): string {
  return violations.map(wording).join("; ");
}

/** One violation in our words. */
function wording(violation: Violation): string {
  const fields = violation.field.filter((item): item is DescField => item.kind === "field");
  const last = fields.at(-1);
  const path = violation.field
    .map((item) => (item.kind === "field" ? `.${item.jsonName}` : item.kind === "list_sub" ? `[${item.index}]` : ""))
    .join("")
    .slice(1);
  const rules = last ? rulesOf(last) : undefined;
  const listed = rules?.type.case === "repeated" && violation.ruleId.startsWith("string.") ? rules.type.value.items?.type : rules?.type;
  switch (violation.ruleId) {
    case "required":
      return `${path} is required`;
    case "string.in":
      return `${path} must be one of ${listed?.case === "string" ? listed.value.in.join(", ") : ""}`;
    case "string.max_len":
      return `${path} must be at most ${listed?.case === "string" ? listed.value.maxLen : ""} characters`;
    case "string.max_bytes":
      return `${path} must be at most ${listed?.case === "string" ? listed.value.maxBytes : ""} bytes`;
    case "string.uuid":
    case "string.uuid_empty":
      return `${path} must be a UUID`;
    case "repeated.max_items":
      return `${path} may name at most ${rules?.type.case === "repeated" ? rules.type.value.maxItems : ""} ${last?.name ?? "items"}`;
    default:
      return `${path}: ${violation.message}`;
  }
}
