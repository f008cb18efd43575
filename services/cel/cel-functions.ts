import {
  CelScalar,
  type CelFunc,
  type CelList,
  type CelValue,
  celEnv,
  celFunc,
  celList,
  celMethod,
  isCelError,
  isCelList,
  isCelMap,
  listType,
} from "@bufbuild/cel";
import { strings } from "@bufbuild/cel/ext";
import { chargeUnits, inputUnits, lengthUnits, SANDBOX_LIMITS, unitsLeft, walkUnits } from "./cel-meter.js";

/**
 * The functions a metered CEL environment offers: the standard library and the strings extension,
 * each charged by the size of what it reads BEFORE it runs (so one call can never outrun the
 * budget), and our own linear implementations where the library's are not linear or differ from
 * the strings extension's specification. They replace the library's overloads by id.
 */

const { STRING, INT, DYN } = CelScalar;
const LIST = listType(DYN);

/** Appends to a macro's own list in place: see `appendInPlace` in cel-mapping.ts. */
export const APPEND_FUNCTION = "__meter_append";

/** One unit per this many map entries an `in` may scan (a numeric key is looked for by a scan). */
const KEYS_PER_UNIT = 64;
/** What converting a time to a named time zone costs (the runtime builds a formatter each time: about half a millisecond). */
const TIME_ZONE_UNITS = 512;
/** What sorting a map's keys costs `format` per entry, beyond reading it. */
const FORMAT_UNITS_PER_ENTRY = 4;
/** What compiling a regular expression costs per character of the pattern. */
const PATTERN_COMPILE_UNITS = 16;
/** Digits and sign an int or uint literal can have: a longer string is no int, whatever it holds. */
const INT_STRING_CHARACTERS = 32;

const TIME_METHODS = new Set([
  "getFullYear",
  "getMonth",
  "getDate",
  "getDayOfMonth",
  "getDayOfWeek",
  "getDayOfYear",
  "getHours",
  "getMinutes",
  "getSeconds",
  "getMilliseconds",
]);

/** Extra units a library function costs beyond reading its strings, by its name and inputs. */
function extraUnits(func: CelFunc, target: CelValue | undefined, args: CelValue[]): number {
  switch (func.name) {
    case "_==_":
    case "_!=_": {
      // Equality stops at the smaller side.
      const left = walkUnits(args[0], unitsLeft());
      return Math.min(left, walkUnits(args[1], left));
    }
    case "@in": {
      const container = args[1];
      if (isCelList(container)) return walkUnits(container, unitsLeft());
      if (isCelMap(container)) return Math.floor(container.size / KEYS_PER_UNIT);
      return 0;
    }
    case "_+_":
      return isCelList(args[0]) && isCelList(args[1]) ? args[0].size + args[1].size : 0;
    case "format":
      return FORMAT_UNITS_PER_ENTRY * walkUnits(args[0], unitsLeft());
    case "matches":
      return matchUnits(target as string, args[0] as string);
    default:
      return func.target?.name === "google.protobuf.Timestamp" && args.length === 1 && TIME_METHODS.has(func.name) ? TIME_ZONE_UNITS : 0;
  }
}

/**
 * A regular expression's match runs in time linear in the input (RE2: no backtracking) times the
 * size of the compiled pattern, which counted repetitions (`a{1000}`) multiply; compiling it is
 * linear in the pattern.
 */
function matchUnits(input: string, pattern: string): number {
  if (pattern.length > SANDBOX_LIMITS.patternCharacters) {
    throw new Error(`matches: a pattern of ${pattern.length} characters; at most ${SANDBOX_LIMITS.patternCharacters}`);
  }
  let size = pattern.length;
  for (const repeat of pattern.matchAll(/\{(\d+)(?:,(\d*))?\}/g)) size += Math.max(Number(repeat[1]), Number(repeat[2] || 0));
  return PATTERN_COMPILE_UNITS * pattern.length + (1 + lengthUnits(input.length)) * (8 + size);
}

/** The library's function, charged by what it reads before it runs. */
function charged(func: CelFunc): CelFunc {
  const impl = function (this: CelValue | undefined, ...args: CelValue[]) {
    let units = inputUnits(this) + extraUnits(func, this, args);
    for (const arg of args) units += inputUnits(arg);
    chargeUnits(units);
    const result = func.call(0, this, args);
    // The signature matched ours, so the library's overload always answers.
    if (result === undefined) throw new Error(`found no matching overload for '${func.name}'`);
    if (isCelError(result)) throw result;
    return result;
  };
  return (
    func.target ? celMethod(func.name, func.target, func.arguments, func.result, impl as never) : celFunc(func.name, func.arguments, func.result, impl as never)
  ) as CelFunc;
}

/** Characters per unit of the work that walks a string code point by code point. */
const CODE_POINTS_PER_UNIT = 8;

const SURROGATE_PAIRS = /[\uD800-\uDBFF][\uDC00-\uDFFF]/g;
const NON_ASCII = /[\u0080-\uFFFF]/;

/** Counts code points, as `size` does, without building an array of them. */
function codePoints(text: string): number {
  return text.length - (text.match(SURROGATE_PAIRS)?.length ?? 0);
}

/** The string's code points, charged first: a walk in JavaScript costs more than a native scan. */
function codePointsOf(text: string): string[] {
  chargeUnits(Math.floor(text.length / CODE_POINTS_PER_UNIT));
  return Array.from(text);
}

function countLimit(n: bigint | undefined): number {
  return n === undefined || n < 0n ? Number.POSITIVE_INFINITY : Number(n);
}

function refuseLong(name: string, length: number): void {
  if (length > SANDBOX_LIMITS.stringCharacters) {
    throw new Error(`${name} would yield a string of ${length} characters; at most ${SANDBOX_LIMITS.stringCharacters}`);
  }
}

/**
 * `replace(old, new[, n])` of the strings extension: the first n matches of `old` (all when n is
 * negative or left out), an empty `old` matching at the start and after each code point. Linear:
 * the matches are found in one pass and the result is sized, charged and refused if too long
 * before it is built.
 */
function replace(this: string, old: string, replacement: string, n?: bigint): string {
  const limit = countLimit(n);
  if (old === "") {
    // Matches at each of the code points' starts and at the end: their number is known before any work.
    const count = Math.min(limit, codePoints(this) + 1);
    if (count === 0 || replacement === "") return this;
    const length = this.length + count * replacement.length;
    refuseLong("replace", length);
    chargeUnits(lengthUnits(length));
    const points = codePointsOf(this);
    const head = points.slice(0, count).map((point) => replacement + point);
    return head.join("") + points.slice(count).join("") + (count > points.length ? replacement : "");
  }
  const at: number[] = [];
  for (let i = this.indexOf(old); i !== -1 && at.length < limit; i = this.indexOf(old, i + old.length)) at.push(i);
  if (at.length === 0) return this;
  const length = this.length + at.length * (replacement.length - old.length);
  refuseLong("replace", length);
  chargeUnits(lengthUnits(length));
  const parts: string[] = [];
  let from = 0;
  for (const i of at) {
    parts.push(this.slice(from, i), replacement);
    from = i + old.length;
  }
  parts.push(this.slice(from));
  return parts.join("");
}

/**
 * `split(separator[, n])` of the strings extension: n of 0 yields no substrings, a negative n (or
 * none) all of them, a positive n at most n, the last holding the rest; an empty separator splits
 * between code points.
 */
function split(this: string, separator: string, n?: bigint): CelList {
  const limit = countLimit(n);
  if (limit === 0) return celList([]);
  const parts: string[] = [];
  if (separator === "") {
    const points = codePointsOf(this);
    if (points.length <= limit) parts.push(...points);
    else parts.push(...points.slice(0, limit - 1), points.slice(limit - 1).join(""));
  } else {
    let from = 0;
    for (let i = this.indexOf(separator); i !== -1 && parts.length < limit - 1; i = this.indexOf(separator, from)) {
      parts.push(this.slice(from, i));
      from = i + separator.length;
    }
    parts.push(this.slice(from));
  }
  chargeUnits(lengthUnits(parts.length));
  return celList(parts);
}

/** `join([separator])`: the length is known, charged and refused if too long before the string is built. */
function join(this: CelList, separator = ""): string {
  let length = 0;
  for (const item of this) {
    if (typeof item !== "string") throw new Error("invalid argument to function join: list contains non-string value");
    length += item.length;
  }
  length += Math.max(0, this.size - 1) * separator.length;
  refuseLong("join", length);
  chargeUnits(this.size + lengthUnits(length));
  return [...(this as Iterable<string>)].join(separator);
}

/** The accumulator of `map` and `filter`: a list its own macro appends to in place (see cel-mapping.ts). */
const appendable = new WeakMap<CelList, CelValue[]>();

function append(list: CelList, more: CelList): CelList {
  chargeUnits(more.size);
  const own = appendable.get(list);
  if (own) {
    for (const value of more) own.push(value);
    return list;
  }
  chargeUnits(list.size);
  const array = [...list, ...more];
  const grown = celList(array);
  appendable.set(grown, array);
  return grown;
}

const OWN_FUNCS: CelFunc[] = [
  celMethod("replace", STRING, [STRING, STRING], STRING, replace),
  celMethod("replace", STRING, [STRING, STRING, INT], STRING, replace),
  celMethod("split", STRING, [STRING], LIST, split),
  celMethod("split", STRING, [STRING, INT], LIST, split),
  celMethod("join", LIST, [], STRING, join as never),
  celMethod("join", LIST, [STRING], STRING, join as never),
  // ASCII letters only: the runtime's own case mapping where every character is ASCII.
  celMethod("lowerAscii", STRING, [], STRING, function () {
    return NON_ASCII.test(this) ? this.replace(/[A-Z]+/g, (run) => run.toLowerCase()) : this.toLowerCase();
  }),
  celMethod("upperAscii", STRING, [], STRING, function () {
    return NON_ASCII.test(this) ? this.replace(/[a-z]+/g, (run) => run.toUpperCase()) : this.toUpperCase();
  }),
  celFunc("size", [STRING], INT, (text) => BigInt(codePoints(text))),
  celMethod("size", STRING, [], INT, function () {
    return BigInt(codePoints(this));
  }),
  ...(["int", "uint"] as const).map((name) => {
    const library = [...celEnv().funcs].find((func) => func.name === name && func.arguments.length === 1 && func.arguments[0] === STRING)!;
    return celFunc(name, [STRING], name === "int" ? INT : CelScalar.UINT, (text) => {
      if (text.length > INT_STRING_CHARACTERS) throw new Error(`${name}: cannot convert a string of ${text.length} characters`);
      const result = library.call(0, undefined, [text]);
      if (result === undefined || isCelError(result)) throw result ?? new Error(`${name}: cannot convert`);
      return result as never;
    });
  }),
  celFunc(APPEND_FUNCTION, [LIST, LIST], LIST, append),
];

/**
 * Every function of a metered environment, each charged before it runs: the library's own
 * (operators, conversions, time, `matches`, the strings extension) wrapped, and our own
 * implementations replacing the library's by id, wrapped the same way.
 */
export const SANDBOX_FUNCS: CelFunc[] = [...[...celEnv().funcs, ...strings].map(charged), ...OWN_FUNCS.map(charged)];
