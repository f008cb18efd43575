import type { DescField, DescMessage, MessageShape } from "@bufbuild/protobuf";
import { createValidator, ValidationError, type Violation, violationsToProto } from "@bufbuild/protovalidate";
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

const validator = createValidator();

/** Throws InvalidArgument, in our words, unless the message satisfies its schema's rules. */
export function checkRequest<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): void {
  const result = validator.validate(schema, message);
  if (result.kind === "valid") return;
  if (result.kind === "invalid") throw new InvalidArgumentError(violationsWording(result.error.violations));
  throw result.error;
}

/** Checks each request against its schema's rules before the handler runs; answers InvalidArgument in our words. */
export function validationInterceptor(): Interceptor {
  const validate = createValidateInterceptor({ validator });
  return (next) => {
    const validated = validate(next);
    return async (req) => {
      try {
        return await validated(req);
      } catch (err) {
        if (err instanceof ConnectError && err.cause instanceof ValidationError) {
          const [violations, schema] = violationsToProto(err.cause.violations);
          const details = [{ desc: schema, value: violations }];
          throw new ConnectError(violationsWording(err.cause.violations), Code.InvalidArgument, undefined, details, err.cause);
        }
        throw err;
      }
    };
  };
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
