import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { CelScalar, celEnv, celFunc, isCelError, isCelList, isCelMap, mapType, parse, plan, type CelResult, type CelValue } from "@bufbuild/cel";
import { type Expr, ExprSchema } from "@bufbuild/cel-spec/cel/expr/syntax_pb.js";
import type { CustomSourceRule } from "../../gen/warroom/intake/v1/custom_sources_pb.js";
import { InvalidArgumentError } from "../runtime/errors.js";
import { APPEND_FUNCTION, SANDBOX_FUNCS } from "./cel-functions.js";
import { BudgetExceeded, chargeUnits, lengthUnits, meterStopped, SANDBOX_LIMITS, startMeter } from "./cel-meter.js";

/** The limits of a custom source's rules, documented in the README. */
export const MAPPING_LIMITS = {
  rulesPerSource: 20,
  /** Characters of one expression: a long one is a program, not a mapping. */
  expressionCharacters: 2048,
  /** Macros (map, filter, all, exists, exists_one) inside macros, at most this deep. */
  comprehensionNesting: 2,
  /** Nesting of the expression's syntax tree. */
  syntaxDepth: 48,
  /**
   * Cost units one delivery may spend over all its rules' expressions: one per function call
   * (operators included), plus one per 64 characters of each string a call reads (charged before
   * it runs) and yields, plus the size of each list or map a macro walks or a function scans (see
   * cel-functions.ts). A rule set that reads a few dozen fields spends under 200.
   */
  costPerDelivery: 20_000,
} as const;

/** The fields of a rule that hold expressions, in the order they are evaluated. */
const EXPRESSION_FIELDS = ["when", "kind", "title", "severity", "attachKey", "eventId", "entity", "summary", "link", "runbookUrl", "ignoreReason"] as const;
type ExpressionField = (typeof EXPRESSION_FIELDS)[number];

export const RULE_KINDS = ["trigger", "recovery", "no_data", "ignore"] as const;
export const SEVERITIES = ["sev1", "sev2", "sev3", "sev4"] as const;

// Type names a condition may compare against (`type(body.x) == string`).
const TYPE_IDENTIFIERS = new Set(["int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type", "dyn", "timestamp", "duration"]);

/** The prefix of the meter's own names: refused in expressions. */
const METER = "__meter";
/**
 * A variable every macro's loop condition reads: once the evaluation is stopped, reading it throws,
 * and a throw outside a function call ends the whole evaluation at once (a function's error would
 * only fail that call, and a macro would go on to its next element).
 */
const LIVE = `${METER}_live`;

/** Charges a call's result to the budget; a list or map is charged where a macro walks it. */
function charge(value: CelValue, walked: boolean): CelValue {
  let cost = 1;
  if (typeof value === "string" || value instanceof Uint8Array) {
    if (value.length > SANDBOX_LIMITS.stringCharacters) {
      throw new Error(`yields ${typeof value === "string" ? "a string" : "bytes"} of ${value.length}; at most ${SANDBOX_LIMITS.stringCharacters}`);
    }
    cost += lengthUnits(value.length);
  } else if (walked && (isCelList(value) || isCelMap(value))) cost += value.size;
  chargeUnits(cost);
  return value;
}

/** The bindings of one evaluation, with the variable that ends it once it is stopped. */
function withLive(bindings: Record<string, unknown>): Record<string, unknown> {
  return Object.defineProperty({ ...bindings }, LIVE, {
    get() {
      const stopped = meterStopped();
      if (stopped !== undefined) throw new BudgetExceeded(stopped);
      return true;
    },
  });
}

const METER_FUNCS = [
  celFunc(METER, [CelScalar.DYN], CelScalar.DYN, (value) => charge(value, false) as never),
  celFunc(`${METER}_walk`, [CelScalar.DYN], CelScalar.DYN, (value) => charge(value, true) as never),
];

type CelVariables = NonNullable<Parameters<typeof celEnv>[0]>["variables"];

/**
 * A CEL environment whose every expression is metered: the variables it may read, the standard
 * and string functions, and the cost budget one evaluation may spend. Custom sources use it for
 * their mappings; other features (investigation templates) build their own with other variables.
 */
export interface MeteredEnvironment {
  env: ReturnType<typeof celEnv>;
  variables: readonly string[];
  costBudget: number;
}

/** A metered environment over these variables, spending at most `costBudget` per evaluation. */
export function meteredEnvironment(variables: NonNullable<CelVariables>, costBudget: number): MeteredEnvironment {
  return { env: celEnv({ variables, funcs: [...SANDBOX_FUNCS, ...METER_FUNCS] }), variables: Object.keys(variables), costBudget };
}

const MAPPING = meteredEnvironment(
  {
    body: CelScalar.DYN,
    headers: mapType(CelScalar.STRING, CelScalar.STRING),
    query: mapType(CelScalar.STRING, CelScalar.STRING),
    receivedAt: CelScalar.DYN,
  },
  MAPPING_LIMITS.costPerDelivery,
);

export type Program = (bindings: Record<string, unknown>) => CelResult;

/**
 * Compiles one expression in a metered environment, with the limits of a mapping (length,
 * nesting, macros, names); refusals are InvalidArgument naming `where`.
 */
export function compileMetered(environment: MeteredEnvironment, source: string, where: string): Program {
  return compileIn(environment, source, where, undefined);
}

/**
 * Evaluates one program with a fresh budget of its environment; never throws: a failure, or the
 * budget spent, is answered as `{error}`.
 */
export function evaluateMetered(
  environment: MeteredEnvironment,
  program: Program,
  bindings: Record<string, unknown>,
): { value: CelResult } | { error: string } {
  startMeter(environment.costBudget);
  try {
    const result = run(program, withLive(bindings));
    if (isCelError(result)) return { error: firstLine(result.message) };
    return { value: result };
  } catch (err) {
    if (err instanceof BudgetExceeded) return { error: err.message };
    throw err;
  }
}

/** JSON-like CEL values as plain JSON (maps to objects, ints to numbers); undefined for other kinds. */
export function fromCelValue(value: unknown): unknown {
  if (value === null || typeof value === "string" || typeof value === "boolean" || typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  if (isCelList(value)) return [...value].map(fromCelValue);
  if (isCelMap(value)) {
    const out: Record<string, unknown> = {};
    for (const [key, entry] of value) out[String(key)] = fromCelValue(entry);
    return out;
  }
  return undefined;
}

interface CompiledRule {
  name: string;
  programs: Partial<Record<ExpressionField, Program>>;
}

export interface CompiledRules {
  rules: CompiledRule[];
}

/** A rule field's JSON name, for error messages: `rules[2].attachKey`. */
function at(index: number, field: ExpressionField): string {
  return `rules[${index}].${field}`;
}

/**
 * Compiles a source's rules once, when they are saved: each expression is parsed, its names
 * checked against the variables and functions that exist, its shape against the limits, and a
 * constant of the wrong type refused. The result is planned with a cost meter around every call,
 * so evaluation cannot outrun `costPerDelivery`.
 */
export function compileRules(rules: readonly CustomSourceRule[]): CompiledRules {
  if (rules.length === 0) throw new InvalidArgumentError("rules: at least one rule is required");
  if (rules.length > MAPPING_LIMITS.rulesPerSource) {
    throw new InvalidArgumentError(`rules: at most ${MAPPING_LIMITS.rulesPerSource} rules per source (got ${rules.length})`);
  }
  const names = new Set<string>();
  const compiled = rules.map((rule, index) => {
    const name = rule.name.trim() || `rule ${index + 1}`;
    if (name.length > 100) throw new InvalidArgumentError(`rules[${index}].name: at most 100 characters`);
    if (names.has(name)) throw new InvalidArgumentError(`rules[${index}].name: ${JSON.stringify(name)} is used by an earlier rule`);
    names.add(name);
    const programs: Partial<Record<ExpressionField, Program>> = {};
    for (const field of EXPRESSION_FIELDS) {
      const source = rule[field].trim();
      if (source === "") continue;
      programs[field] = compileExpression(source, at(index, field), field);
    }
    const kindConstant = constantOf(rule.kind);
    const ignoresOnly = kindConstant === "ignore";
    if (!programs.title && !ignoresOnly && (rule.kind.trim() === "" || kindConstant === "trigger")) {
      throw new InvalidArgumentError(`${at(index, "title")}: required for a rule that opens incidents`);
    }
    return { name, programs };
  });
  return { rules: compiled };
}

/** The value of an expression that is a plain string literal, else undefined. */
function constantOf(source: string): string | undefined {
  const match = /^\s*(['"])([^'"\\]*)\1\s*$/.exec(source);
  return match ? match[2] : undefined;
}

function compileExpression(source: string, where: string, field: ExpressionField): Program {
  return compileIn(MAPPING, source, where, field);
}

function compileIn(environment: MeteredEnvironment, source: string, where: string, field: ExpressionField | undefined): Program {
  if (source.length > MAPPING_LIMITS.expressionCharacters) {
    throw new InvalidArgumentError(`${where}: at most ${MAPPING_LIMITS.expressionCharacters} characters (got ${source.length})`);
  }
  if (bracketDepth(source) > MAPPING_LIMITS.syntaxDepth) throw tooDeep(where);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(source);
  } catch (err) {
    // The parser recurses: a deeply nested expression may exhaust the stack instead of failing.
    const message = err instanceof RangeError ? "nested too deeply" : err instanceof Error ? err.message : String(err);
    throw new InvalidArgumentError(`${where}: does not compile: ${firstLine(message)}`);
  }
  checkNames(environment, parsed.expr, where);
  if (field) checkConstant(parsed.expr, where, field);
  parsed.expr = metered(parsed.expr, { next: maxId(parsed.expr) + 1n });
  const program = plan(environment.env, parsed) as Program;
  return program;
}

/**
 * The deepest nesting of brackets in `source`, outside string literals and comments. The parser
 * recurses once per bracket: checked before parsing, the limit does not depend on how much stack
 * the parser's frames take (less once the JIT has compiled it), and brackets that leave no node
 * behind (around a constant, or a negation the parser folds) still count.
 */
function bracketDepth(source: string): number {
  let depth = 0;
  let deepest = 0;
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    if (c === "'" || c === '"') {
      const raw = /[rR]/.test(source[i - 1] ?? "") || (/[rR]/.test(source[i - 2] ?? "") && /[bB]/.test(source[i - 1] ?? ""));
      const quote = source.startsWith(c.repeat(3), i) ? c.repeat(3) : c;
      i += quote.length;
      while (i < source.length && !source.startsWith(quote, i)) i += !raw && source[i] === "\\" ? 2 : 1;
      i += quote.length - 1;
    } else if (c === "/" && source[i + 1] === "/") {
      const end = source.indexOf("\n", i);
      i = end === -1 ? source.length : end;
    } else if (c === "(" || c === "[" || c === "{") deepest = Math.max(deepest, ++depth);
    else if (c === ")" || c === "]" || c === "}") depth--;
  }
  return deepest;
}

function tooDeep(where: string): InvalidArgumentError {
  return new InvalidArgumentError(`${where}: nested deeper than ${MAPPING_LIMITS.syntaxDepth} levels`);
}

function firstLine(text: string): string {
  return text.split("\n")[0]!.slice(0, 300);
}

/** Refuses unknown variables and functions, and limits nesting, without recursion on the input. */
function checkNames(environment: MeteredEnvironment, root: Expr, where: string): void {
  const { variables, env } = environment;
  const stack: { expr: Expr; depth: number; comprehensions: number; locals: readonly string[] }[] = [{ expr: root, depth: 1, comprehensions: 0, locals: [] }];
  while (stack.length > 0) {
    const { expr, depth, comprehensions, locals } = stack.pop()!;
    if (depth > MAPPING_LIMITS.syntaxDepth) throw tooDeep(where);
    const next = (child: Expr | undefined, extra?: { comprehension?: boolean; locals?: readonly string[] }) => {
      if (!child) return;
      stack.push({
        expr: child,
        depth: depth + 1,
        comprehensions: comprehensions + (extra?.comprehension ? 1 : 0),
        locals: extra?.locals ? [...locals, ...extra.locals] : locals,
      });
    };
    const kind = expr.exprKind;
    switch (kind.case) {
      case "identExpr": {
        const name = kind.value.name;
        if (!variables.includes(name) && !locals.includes(name) && !TYPE_IDENTIFIERS.has(name)) {
          throw new InvalidArgumentError(`${where}: unknown name ${JSON.stringify(name)}; use ${variables.join(", ")}`);
        }
        break;
      }
      case "selectExpr":
        next(kind.value.operand);
        break;
      case "callExpr": {
        const name = kind.value.function;
        // Operators (`_+_`, `_[_]`, `_?_:_`, `!_`, `@in`) are the parser's own names.
        const operator = /^(_[^_]|!_|@)/.test(name);
        if (name.startsWith(METER) || (!operator && !env.funcs.find(name))) {
          throw new InvalidArgumentError(`${where}: unknown function ${JSON.stringify(name)}`);
        }
        next(kind.value.target);
        for (const arg of kind.value.args) next(arg);
        break;
      }
      case "listExpr":
        for (const element of kind.value.elements) next(element);
        break;
      case "structExpr":
        if (kind.value.messageName) throw new InvalidArgumentError(`${where}: message ${JSON.stringify(kind.value.messageName)} is not available; use a map`);
        for (const entry of kind.value.entries) {
          if (entry.keyKind.case === "mapKey") next(entry.keyKind.value);
          next(entry.value);
        }
        break;
      case "comprehensionExpr": {
        const c = kind.value;
        if (comprehensions + 1 > MAPPING_LIMITS.comprehensionNesting) {
          throw new InvalidArgumentError(`${where}: macros (map, filter, all, exists) nested more than ${MAPPING_LIMITS.comprehensionNesting} deep`);
        }
        next(c.iterRange);
        const inner = { comprehension: true, locals: [c.iterVar, c.iterVar2, c.accuVar].filter(Boolean) };
        next(c.accuInit, inner);
        next(c.loopCondition, inner);
        next(c.loopStep, inner);
        next(c.result, inner);
        break;
      }
      default:
        break;
    }
  }
}

/** A constant of the wrong type or value can be refused now rather than on every delivery. */
function checkConstant(expr: Expr, where: string, field: ExpressionField): void {
  if (expr.exprKind.case !== "constExpr") return;
  const constant = expr.exprKind.value.constantKind;
  const expected = field === "when" ? "boolValue" : field === "entity" ? undefined : "stringValue";
  if (field === "entity") throw new InvalidArgumentError(`${where}: must yield a map {"kind": ..., "id": ...}, not a constant`);
  if (constant.case === "nullValue" && field !== "when" && field !== "kind" && field !== "title" && field !== "severity") return;
  if (constant.case !== expected) {
    throw new InvalidArgumentError(`${where}: must yield a ${field === "when" ? "bool" : "string"}, not ${constant.case?.replace(/Value$/, "") ?? "nothing"}`);
  }
  if (field === "kind" && !(RULE_KINDS as readonly string[]).includes(constant.value as string)) {
    throw new InvalidArgumentError(`${where}: must be one of ${RULE_KINDS.join(", ")}`);
  }
  if (field === "severity" && !(SEVERITIES as readonly string[]).includes(constant.value as string)) {
    throw new InvalidArgumentError(`${where}: must be one of ${SEVERITIES.join(", ")}`);
  }
}

function maxId(root: Expr): bigint {
  let max = 0n;
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (node === null || typeof node !== "object") continue;
    if (Array.isArray(node)) {
      stack.push(...node);
      continue;
    }
    const id = (node as { id?: unknown }).id;
    if (typeof id === "bigint" && id > max) max = id;
    for (const value of Object.values(node)) if (value !== null && typeof value === "object") stack.push(value);
  }
  return max;
}

/**
 * Wraps every call in the meter, and the range of every macro in the meter that charges its size,
 * so that a loop over a large list or a growing string spends the budget as it goes.
 */
function metered(expr: Expr, ids: { next: bigint }): Expr {
  const wrap = (inner: Expr, fn: string): Expr =>
    create(ExprSchema, { id: ids.next++, exprKind: { case: "callExpr", value: { function: fn, args: [inner] } } });
  const kind = expr.exprKind;
  switch (kind.case) {
    case "callExpr":
      if (kind.value.target) kind.value.target = metered(kind.value.target, ids);
      kind.value.args = kind.value.args.map((arg) => metered(arg, ids));
      return wrap(expr, METER);
    case "selectExpr":
      if (kind.value.operand) kind.value.operand = metered(kind.value.operand, ids);
      return expr;
    case "listExpr":
      kind.value.elements = kind.value.elements.map((element) => metered(element, ids));
      return expr;
    case "structExpr":
      for (const entry of kind.value.entries) {
        if (entry.keyKind.case === "mapKey") entry.keyKind.value = metered(entry.keyKind.value, ids);
        if (entry.value) entry.value = metered(entry.value, ids);
      }
      return expr;
    case "comprehensionExpr": {
      const c = kind.value;
      if (c.iterRange) c.iterRange = wrap(metered(c.iterRange, ids), `${METER}_walk`);
      // The step's own call appends to the accumulator (map, filter): charging the accumulator's
      // size there would charge each element once per later element. Its arguments are metered.
      if (c.loopStep) {
        appendInPlace(c.loopStep, c.accuVar);
        const step = c.loopStep.exprKind;
        if (step.case === "callExpr") {
          if (step.value.target) step.value.target = metered(step.value.target, ids);
          step.value.args = step.value.args.map((arg) => metered(arg, ids));
          c.loopStep = wrap(c.loopStep, METER);
        } else {
          c.loopStep = metered(c.loopStep, ids);
        }
      }
      if (c.loopCondition) {
        const live = create(ExprSchema, { id: ids.next++, exprKind: { case: "identExpr", value: { name: LIVE } } });
        c.loopCondition = create(ExprSchema, {
          id: ids.next++,
          exprKind: { case: "callExpr", value: { function: "_&&_", args: [live, metered(c.loopCondition, ids)] } },
        });
      }
      if (c.result) c.result = metered(c.result, ids);
      return expr;
    }
    default:
      return expr;
  }
}

/**
 * `map` and `filter` build their list one `accumulator + [element]` at a time, and the library's
 * `+` nests the lists it joins, so reading the result costs the square of its length. The
 * accumulator is the macro's own (an expression cannot name it): it is appended to in place.
 */
function appendInPlace(step: Expr, accuVar: string): void {
  const kind = step.exprKind;
  if (kind.case !== "callExpr") return;
  const call = kind.value;
  if (call.function === "_?_:_" && call.args[1]) {
    appendInPlace(call.args[1], accuVar);
    return;
  }
  const [accumulator, element] = call.args;
  if (
    call.function === "_+_" &&
    accumulator?.exprKind.case === "identExpr" &&
    accumulator.exprKind.value.name === accuVar &&
    element?.exprKind.case === "listExpr"
  ) {
    call.function = APPEND_FUNCTION;
  }
}

/** What the rules read from one delivery. */
export interface MappingInput {
  body: unknown;
  headers: Record<string, string>;
  query: Record<string, string>;
  receivedAt: Date;
}

export type DeliveryKind = "trigger" | "recovery" | "no_data" | "ignore";

/** The fields a matched rule yields, checked for type. */
export interface MappedFields {
  kind: DeliveryKind;
  title: string;
  severity: (typeof SEVERITIES)[number];
  attachKey: string;
  eventId: string;
  entity?: { kind: string; id: string };
  summary?: string;
  link?: string;
  runbookUrl?: string;
  ignoreReason?: string;
}

export interface RuleVerdict {
  rule: string;
  matched: boolean;
  reason: string;
}

/** One evaluation: the rule that matched and its fields, or the error that sends it to the default incident. */
export interface MappingResult {
  verdicts: RuleVerdict[];
  matchedRule?: string;
  fields?: MappedFields;
  error?: string;
  warnings: string[];
}

class FieldError extends Error {
  override name = "FieldError";
}

/**
 * Evaluates the rules in order on one delivery; the first whose condition holds maps it. Never
 * throws: an error, a wrong type, an exhausted budget or no matching rule is returned as `error`,
 * and the caller opens the default incident.
 */
export function evaluateRules(compiled: CompiledRules, input: MappingInput): MappingResult {
  const verdicts: RuleVerdict[] = [];
  const warnings: string[] = [];
  const oversized = oversizedString(input);
  if (oversized) {
    for (const rule of compiled.rules) verdicts.push({ rule: rule.name, matched: false, reason: "not tried: the payload has a string too long for rules" });
    return { verdicts, warnings, error: oversized };
  }
  const bindings = withLive({
    body: toCelInput(input.body),
    headers: new Map(Object.entries(input.headers)),
    query: new Map(Object.entries(input.query)),
    receivedAt: timestampFromDate(input.receivedAt),
  });
  startMeter(MAPPING_LIMITS.costPerDelivery);
  let matched: CompiledRule | undefined;
  let fields: MappedFields | undefined;
  let error: string | undefined;
  const conditionErrors: string[] = [];
  try {
    for (const rule of compiled.rules) {
      if (matched || error) {
        verdicts.push({ rule: rule.name, matched: false, reason: `not tried: rule ${JSON.stringify(matched?.name ?? "")} matched first` });
        continue;
      }
      const when = rule.programs.when ? run(rule.programs.when, bindings) : true;
      if (isCelError(when)) {
        const message = `condition failed: ${firstLine(when.message)}`;
        verdicts.push({ rule: rule.name, matched: false, reason: message });
        conditionErrors.push(`${rule.name}: ${message}`);
        continue;
      }
      if (typeof when !== "boolean") {
        const message = `condition yielded ${typeName(when)}, not a bool`;
        verdicts.push({ rule: rule.name, matched: false, reason: message });
        conditionErrors.push(`${rule.name}: ${message}`);
        continue;
      }
      if (!when) {
        verdicts.push({ rule: rule.name, matched: false, reason: "condition is false" });
        continue;
      }
      matched = rule;
      try {
        fields = mapFields(rule, bindings, warnings);
        verdicts.push({ rule: rule.name, matched: true, reason: "condition is true" });
      } catch (err) {
        if (err instanceof BudgetExceeded) throw err;
        error = `rule ${JSON.stringify(rule.name)}: ${(err as Error).message}`;
        verdicts.push({ rule: rule.name, matched: true, reason: `matched, but ${(err as Error).message}` });
      }
    }
  } catch (err) {
    if (!(err instanceof BudgetExceeded)) throw err;
    error = err.message;
    for (const rule of compiled.rules.slice(verdicts.length)) verdicts.push({ rule: rule.name, matched: false, reason: `not tried: ${err.message}` });
  }
  if (!matched && !error) {
    error = conditionErrors.length > 0 ? `no rule matched (${conditionErrors.join("; ")})` : "no rule matched";
  }
  const result: MappingResult = { verdicts, warnings };
  if (matched) result.matchedRule = matched.name;
  if (error) result.error = error;
  else if (fields) result.fields = fields;
  return result;
}

/** Runs a program; a stop of the meter (budget or time spent) ends the whole evaluation. */
function run(program: Program, bindings: Record<string, unknown>): CelResult {
  const result = program(bindings);
  const stopped = meterStopped();
  if (stopped !== undefined) throw new BudgetExceeded(stopped);
  return result;
}

/**
 * The first string of a delivery longer than rules may read, named by its path; such a payload is
 * not mapped at all (the default incident), so no rule ever works on a string beyond the bound.
 */
function oversizedString(input: MappingInput): string | undefined {
  const limit = SANDBOX_LIMITS.stringCharacters;
  // The path is built only for the string found: each node knows its parent and its key.
  type Node = { value: unknown; parent?: Node; key: string | number | typeof KEY };
  const stack: Node[] = [
    { value: input.body, key: "body" },
    { value: input.headers, key: "headers" },
    { value: input.query, key: "query" },
  ];
  const push = (value: unknown, parent: Node, key: Node["key"]) => {
    if (typeof value === "string" ? value.length > limit : value !== null && typeof value === "object") stack.push({ value, parent, key });
  };
  while (stack.length > 0) {
    const node = stack.pop()!;
    const value = node.value;
    if (typeof value === "string") {
      if (value.length > limit) return `${pathOf(node)} is a string of ${value.length} characters; rules read strings of at most ${limit} (64 KiB)`;
    } else if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) push(value[i], node, i);
    } else if (value !== null && typeof value === "object") {
      for (const [key, entry] of value instanceof URLSearchParams ? value : Object.entries(value)) {
        push(key, node, KEY);
        push(entry, node, key);
      }
    }
  }
  return undefined;
}

/** Marks a map key in the path of an oversized string. */
const KEY = Symbol("key");

/** `body.alerts[0].message`, `headers["x-big"]`, or `a key of body.labels`. */
function pathOf(node: { parent?: unknown; key: string | number | typeof KEY }): string {
  let path = "";
  for (let at: typeof node | undefined = node; at; at = at.parent as typeof node | undefined) {
    const key = at.key;
    if (key === KEY) return `a key of ${pathOf(at.parent as typeof node)}`;
    path =
      typeof key === "number"
        ? `[${key}]${path}`
        : !at.parent || /^[A-Za-z_][A-Za-z0-9_]*$/.test(key)
          ? `${at.parent ? "." : ""}${key}${path}`
          : `[${JSON.stringify(key.slice(0, 40))}]${path}`;
  }
  return path;
}

function mapFields(rule: CompiledRule, bindings: Record<string, unknown>, warnings: string[]): MappedFields {
  const value = (field: ExpressionField): CelResult | undefined => {
    const program = rule.programs[field];
    if (!program) return undefined;
    const result = run(program, bindings);
    if (isCelError(result)) throw new FieldError(`${field} failed: ${firstLine(result.message)}`);
    return result;
  };
  const text = (field: ExpressionField, options: { nullable: boolean }): string | undefined => {
    const result = value(field);
    if (result === undefined) return undefined;
    if (result === null && options.nullable) return undefined;
    if (typeof result !== "string") throw new FieldError(`${field} yielded ${typeName(result)}, not a string`);
    return result;
  };
  const kind = (text("kind", { nullable: false }) ?? "trigger") as DeliveryKind;
  if (!(RULE_KINDS as readonly string[]).includes(kind))
    throw new FieldError(`kind yielded ${JSON.stringify(kind.slice(0, 40))}, not one of ${RULE_KINDS.join(", ")}`);
  if (kind === "ignore") {
    const reason = text("ignoreReason", { nullable: true })?.trim();
    return { kind, title: "", severity: "sev3", attachKey: "", eventId: "", ignoreReason: reason || `dropped by rule ${JSON.stringify(rule.name)}` };
  }
  const title = text("title", { nullable: kind !== "trigger" })?.trim() ?? "";
  if (kind === "trigger" && title === "") throw new FieldError("title yielded an empty string");
  const severity = text("severity", { nullable: false }) ?? "sev3";
  if (!(SEVERITIES as readonly string[]).includes(severity))
    throw new FieldError(`severity yielded ${JSON.stringify(severity.slice(0, 40))}, not one of ${SEVERITIES.join(", ")}`);
  let attachKey = "";
  if (rule.programs.attachKey) {
    // An empty key must never merge unrelated alerts onto one incident: no key at all instead.
    attachKey = text("attachKey", { nullable: true })?.trim() ?? "";
    if (attachKey === "") warnings.push("attachKey was empty or null: this delivery has no attach key and opens its own incident");
  }
  const fields: MappedFields = {
    kind,
    title,
    severity: severity as MappedFields["severity"],
    attachKey,
    eventId: text("eventId", { nullable: true })?.trim() ?? "",
  };
  const entity = value("entity");
  if (entity !== undefined && entity !== null) {
    if (!isCelMap(entity)) throw new FieldError(`entity yielded ${typeName(entity)}, not a map {"kind": ..., "id": ...}`);
    const entityKind = entity.get("kind");
    const entityId = entity.get("id");
    if (typeof entityKind !== "string" || typeof entityId !== "string") throw new FieldError('entity must have string "kind" and "id"');
    if (entityKind.trim() && entityId.trim()) fields.entity = { kind: entityKind.trim(), id: entityId.trim() };
    else warnings.push("entity had an empty kind or id: left out");
  }
  const summary = text("summary", { nullable: true });
  if (summary) fields.summary = summary;
  for (const field of ["link", "runbookUrl"] as const) {
    const url = text(field, { nullable: true })?.trim();
    if (!url) continue;
    if (/^https?:\/\//i.test(url)) fields[field] = url;
    else warnings.push(`${field} is not an http(s) URL: left out`);
  }
  return fields;
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "bigint") return "int";
  if (typeof value === "number") return "double";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "string") return "string";
  if (isCelList(value)) return "list";
  if (isCelMap(value)) return "map";
  return typeof value;
}

/**
 * JSON as CEL reads it: objects become maps (so an expression reaches only the payload's own
 * keys, never a JavaScript prototype's), integers stay doubles as JSON has them. Depth was bounded
 * when the body was read.
 */
export function toCelInput(value: unknown): unknown {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map(toCelInput);
  if (value instanceof URLSearchParams) return new Map(value.entries());
  const map = new Map<string, unknown>();
  for (const [key, entry] of Object.entries(value)) map.set(key, toCelInput(entry));
  return map;
}
