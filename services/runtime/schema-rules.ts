import { type DescField, getOption, hasOption } from "@bufbuild/protobuf";
import { type FieldRules, field as fieldRulesOption } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";

/** The protovalidate rules the schema gives a field, if any. */
export function rulesOf(field: DescField): FieldRules | undefined {
  return hasOption(field, fieldRulesOption) ? getOption(field, fieldRulesOption) : undefined;
}

/**
 * The values a string field's `string.in` rule allows (for a repeated field, its items'): the
 * schema is the one place a vocabulary is written, and the code reads it from there.
 */
export function allowedValues(field: DescField): readonly string[] {
  const rules = rulesOf(field);
  const type = rules?.type.case === "repeated" ? rules.type.value.items?.type : rules?.type;
  if (type?.case !== "string" || type.value.in.length === 0) throw new Error(`${field.parent.typeName}.${field.name} has no string.in rule`);
  return type.value.in;
}
