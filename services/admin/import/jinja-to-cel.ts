import { create } from "@bufbuild/protobuf";
import { CustomSourceRuleSchema } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import { compileRules, MAPPING_LIMITS } from "../../cel/cel-mapping.js";

/**
 * Grafana OnCall's Jinja2 templates turned into the CEL of a custom source's rules, for the forms
 * that mean the same in both: text, `{{ payload.x }}`, `{{ payload["x"] }}`, `payload.x.get("y")`,
 * nested and indexed paths, `| default("y")`, `{% if %}`/`{% elif %}`/`{% else %}`/`{% endif %}`
 * over `==`, `!=`, `and`, `or`, `not` and parentheses, and `{# comments #}`. Anything else (other
 * filters and variables, loops, `set`, bare truthiness of a value) is refused with the reason,
 * never guessed at: a template that cannot be translated is reported and kept as it was.
 *
 * Jinja renders a missing key as nothing, where CEL would fail: every path is read behind a
 * presence check (`'x' in body && ...`), so a payload without the key yields what OnCall showed.
 */

/** Longer templates are not translated (the expression limit would refuse them anyway). */
export const MAX_TEMPLATE_CHARACTERS = 4096;
/** `{% if %}`, parentheses and `not` nested deeper than this are not translated. */
export const MAX_TEMPLATE_NESTING = 8;
const MAX_PATH_SEGMENTS = 16;

export class UntranslatableError extends Error {
  override name = "UntranslatableError";
}

export type Translation = { ok: true; cel: string } | { ok: false; reason: string };

// --- tokens of the template ---------------------------------------------------------------

type Part = { t: "text"; text: string } | { t: "out"; src: string; at: number } | { t: "tag"; src: string; at: number };

/** Splits a template into text, `{{ … }}` and `{% … %}`, honouring `-` whitespace control. */
function splitTemplate(template: string): Part[] {
  const parts: Part[] = [];
  let i = 0;
  let trimNext = false;
  while (i < template.length) {
    const open = template.slice(i).search(/\{[{%#]/);
    let text = open < 0 ? template.slice(i) : template.slice(i, i + open);
    if (trimNext) text = text.replace(/^\s+/, "");
    trimNext = false;
    if (open < 0) {
      if (text) parts.push({ t: "text", text });
      break;
    }
    const start = i + open;
    const kind = template[start + 1]!;
    const close = kind === "{" ? "}}" : kind === "%" ? "%}" : "#}";
    const end = template.indexOf(close, start + 2);
    if (end < 0) throw new UntranslatableError(`"${template.slice(start, start + 2)}" at ${start} is never closed`);
    let inner = template.slice(start + 2, end);
    if (inner.startsWith("-")) {
      text = text.replace(/\s+$/, "");
      inner = inner.slice(1);
    }
    if (inner.endsWith("-")) {
      trimNext = true;
      inner = inner.slice(0, -1);
    }
    if (text) parts.push({ t: "text", text });
    if (kind === "{") parts.push({ t: "out", src: inner, at: start });
    else if (kind === "%") parts.push({ t: "tag", src: inner.trim(), at: start });
    i = end + 2;
  }
  return parts;
}

// --- expressions ----------------------------------------------------------------------------

type Tok = { k: "name" | "str" | "num" | "op"; v: string; at: number };

function lex(src: string, base: number): Tok[] {
  const toks: Tok[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const at = base + i;
    if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(src.slice(i))![0];
      toks.push({ k: "name", v: m, at });
      i += m.length;
    } else if (/[0-9]/.test(c)) {
      const m = /^[0-9]+(\.[0-9]+)?/.exec(src.slice(i))![0];
      toks.push({ k: "num", v: m, at });
      i += m.length;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      let value = "";
      for (; j < src.length && src[j] !== c; j++) {
        if (src[j] === "\\") {
          const n = src[++j];
          const escapes: Record<string, string> = { n: "\n", t: "\t", "\\": "\\", '"': '"', "'": "'" };
          if (n === undefined || !(n in escapes)) throw new UntranslatableError(`an escape in a string at ${at} that is not \\n, \\t, \\\\ or a quote`);
          value += escapes[n];
        } else value += src[j];
      }
      if (j >= src.length) throw new UntranslatableError(`a string at ${at} is never closed`);
      toks.push({ k: "str", v: value, at });
      i = j + 1;
    } else {
      const two = src.slice(i, i + 2);
      if (two === "==" || two === "!=") {
        toks.push({ k: "op", v: two, at });
        i += 2;
      } else if ("|.[]()+,".includes(c)) {
        toks.push({ k: "op", v: c, at });
        i++;
      } else throw new UntranslatableError(`"${c}" at ${at} is not part of the forms translated`);
    }
  }
  return toks;
}

type Lit = string | number | boolean | null;
type Seg = string | number;
/** What an expression is: a literal, a path into the payload (with a default), or a condition. */
type Val = { t: "lit"; v: Lit } | { t: "path"; segs: Seg[]; fallback?: Lit } | { t: "bool"; cel: string };

/** A CEL string literal of the text. */
export function celString(s: string): string {
  return `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t")}'`;
}

function celLit(v: Lit): string {
  if (typeof v === "string") return celString(v);
  if (typeof v === "number") return Number.isInteger(v) ? `${v}.0` : String(v);
  if (v === null) return "null";
  return String(v);
}

/** How Jinja prints a literal. */
function rendered(v: Lit): string {
  if (v === null) return "None";
  if (typeof v === "boolean") return v ? "True" : "False";
  return String(v);
}

function pathCel(segs: Seg[]): string {
  let cel = "body";
  for (const s of segs) cel += typeof s === "number" ? `[${s}]` : /^[A-Za-z_][A-Za-z0-9_]*$/.test(s) && !CEL_RESERVED.has(s) ? `.${s}` : `[${celString(s)}]`;
  return cel;
}

const CEL_RESERVED = new Set([
  "true",
  "false",
  "null",
  "in",
  "as",
  "break",
  "const",
  "continue",
  "else",
  "for",
  "function",
  "if",
  "import",
  "let",
  "loop",
  "package",
  "namespace",
  "return",
  "var",
  "void",
  "while",
]);

/** The payload holds every key of the path (a list index: the list is long enough). */
function presence(segs: Seg[]): string {
  const checks: string[] = [];
  for (let i = 0; i < segs.length; i++) {
    const parent = pathCel(segs.slice(0, i));
    const s = segs[i]!;
    checks.push(typeof s === "number" ? `size(${parent}) > ${s}` : `${celString(s)} in ${parent}`);
  }
  return checks.join(" && ");
}

/** The value as a CEL value (dyn): a path without its key yields its default. */
function asValue(v: Val): string {
  if (v.t === "lit") return celLit(v.v);
  if (v.t === "bool") return `(${v.cel})`;
  if (v.fallback === undefined) throw new UntranslatableError("a comparison of a path without a default");
  return `(${presence(v.segs)} ? ${pathCel(v.segs)} : ${celLit(v.fallback)})`;
}

/** The value as the text Jinja prints. */
function asString(v: Val): string {
  if (v.t === "lit") return celString(rendered(v.v));
  if (v.t === "bool") return `(${v.cel} ? 'True' : 'False')`;
  const fallback = v.fallback === undefined ? "''" : celString(rendered(v.fallback));
  return `(${presence(v.segs)} ? string(${pathCel(v.segs)}) : ${fallback})`;
}

function asBool(v: Val): string {
  if (v.t === "bool") return v.cel;
  if (v.t === "lit" && typeof v.v === "boolean") return String(v.v);
  throw new UntranslatableError("a condition that is not a comparison (a bare value's truthiness depends on its type)");
}

class ExprParser {
  private i = 0;
  private depth = 0;
  constructor(private readonly toks: Tok[]) {}

  parseAll(): Val {
    const v = this.or();
    const left = this.toks[this.i];
    if (left) throw new UntranslatableError(`"${left.v}" at ${left.at} is not part of the forms translated`);
    return v;
  }

  private peek(): Tok | undefined {
    return this.toks[this.i];
  }
  private isName(v: string): boolean {
    const t = this.peek();
    return t?.k === "name" && t.v === v;
  }
  private isOp(v: string): boolean {
    const t = this.peek();
    return t?.k === "op" && t.v === v;
  }
  private expectOp(v: string): void {
    const t = this.peek();
    if (t?.k !== "op" || t.v !== v) throw new UntranslatableError(`expected "${v}" ${t ? `at ${t.at}, found "${t.v}"` : "at the end"}`);
    this.i++;
  }
  private deeper<T>(f: () => T): T {
    if (++this.depth > MAX_TEMPLATE_NESTING) throw new UntranslatableError(`nested more than ${MAX_TEMPLATE_NESTING} deep`);
    try {
      return f();
    } finally {
      this.depth--;
    }
  }

  private or(): Val {
    let left = this.and();
    while (this.isName("or")) {
      this.i++;
      const right = this.and();
      left = { t: "bool", cel: `(${asBool(left)} || ${asBool(right)})` };
    }
    return left;
  }
  private and(): Val {
    let left = this.not();
    while (this.isName("and")) {
      this.i++;
      const right = this.not();
      left = { t: "bool", cel: `(${asBool(left)} && ${asBool(right)})` };
    }
    return left;
  }
  private not(): Val {
    if (this.isName("not")) {
      this.i++;
      return this.deeper(() => ({ t: "bool", cel: `!(${asBool(this.not())})` }));
    }
    return this.comparison();
  }
  private comparison(): Val {
    const left = this.filtered();
    if (this.isOp("==") || this.isOp("!=")) {
      const op = this.peek()!.v;
      this.i++;
      const right = this.filtered();
      const eq = equality(left, right);
      return { t: "bool", cel: op === "==" ? eq : `!(${eq})` };
    }
    return left;
  }
  private filtered(): Val {
    let v = this.primary();
    while (this.isOp("|")) {
      this.i++;
      const name = this.peek();
      if (name?.k !== "name") throw new UntranslatableError(`a filter name expected ${name ? `at ${name.at}` : "at the end"}`);
      this.i++;
      if (name.v !== "default" && name.v !== "d") throw new UntranslatableError(`the filter "${name.v}" (only default is translated)`);
      this.expectOp("(");
      const arg = this.literal();
      if (this.isOp(",")) throw new UntranslatableError('default with a second argument (only default("y") is translated)');
      this.expectOp(")");
      v = withDefault(v, arg);
    }
    return v;
  }
  private literal(): Lit {
    const t = this.peek();
    if (!t) throw new UntranslatableError("a value expected at the end");
    this.i++;
    if (t.k === "str") return t.v;
    if (t.k === "num") return Number(t.v);
    if (t.k === "name" && (t.v === "true" || t.v === "True")) return true;
    if (t.k === "name" && (t.v === "false" || t.v === "False")) return false;
    if (t.k === "name" && (t.v === "none" || t.v === "None")) return null;
    throw new UntranslatableError(`"${t.v}" at ${t.at}: only a string, number, true, false or none is translated here`);
  }
  private primary(): Val {
    const t = this.peek();
    if (!t) throw new UntranslatableError("a value expected at the end");
    if (t.k === "op" && t.v === "(") {
      this.i++;
      const v = this.deeper(() => this.or());
      this.expectOp(")");
      return v;
    }
    if (t.k === "name" && t.v === "payload") {
      this.i++;
      return this.path();
    }
    if (t.k === "name" && !["true", "True", "false", "False", "none", "None"].includes(t.v)) {
      throw new UntranslatableError(`the variable "${t.v}" at ${t.at} (only payload is translated)`);
    }
    return { t: "lit", v: this.literal() };
  }
  private path(): Val {
    const segs: Seg[] = [];
    let fallback: Lit | undefined;
    for (;;) {
      if (segs.length > MAX_PATH_SEGMENTS) throw new UntranslatableError(`a path longer than ${MAX_PATH_SEGMENTS} keys`);
      if (fallback !== undefined && (this.isOp(".") || this.isOp("["))) throw new UntranslatableError("a path read past .get()");
      if (this.isOp(".")) {
        this.i++;
        const name = this.peek();
        if (name?.k !== "name") throw new UntranslatableError(`a key expected after "." ${name ? `at ${name.at}` : "at the end"}`);
        this.i++;
        if (name.v === "get" && this.isOp("(")) {
          // payload.get("x") and payload.get("x", "d"): the key, with a default (None without one).
          this.i++;
          const key = this.literal();
          if (typeof key !== "string") throw new UntranslatableError(".get() of a key that is not a string");
          segs.push(key);
          fallback = null;
          if (this.isOp(",")) {
            this.i++;
            fallback = this.literal();
          }
          this.expectOp(")");
          continue;
        }
        if (this.isOp("(")) throw new UntranslatableError(`the method "${name.v}" at ${name.at} (only .get() is translated)`);
        segs.push(name.v);
      } else if (this.isOp("[")) {
        this.i++;
        const key = this.literal();
        if (typeof key === "number" && Number.isInteger(key)) segs.push(key);
        else if (typeof key === "string") segs.push(key);
        else throw new UntranslatableError("an index that is neither a string nor a whole number");
        this.expectOp("]");
      } else break;
    }
    if (segs.length === 0) throw new UntranslatableError("the whole payload (only a key of it is translated)");
    return fallback === undefined ? { t: "path", segs } : { t: "path", segs, fallback };
  }
}

function withDefault(v: Val, fallback: Lit): Val {
  if (v.t !== "path") throw new UntranslatableError("default on something other than a payload path");
  // Jinja's default replaces an undefined value only; a .get() already yielded None then.
  if (v.fallback !== undefined) throw new UntranslatableError("default after .get() (the key is never undefined there)");
  return { t: "path", segs: v.segs, fallback };
}

/** Jinja's `==`: a missing key equals nothing but another missing key's default. */
function equality(a: Val, b: Val): string {
  const side = (v: Val): { guard?: string; value: string } =>
    v.t === "path" && v.fallback === undefined ? { guard: presence(v.segs), value: pathCel(v.segs) } : { value: asValue(v) };
  const l = side(a);
  const r = side(b);
  const guards = [l.guard, r.guard].filter(Boolean);
  return `(${[...guards, `${l.value} == ${r.value}`].join(" && ")})`;
}

function parseExpression(src: string, at: number): Val {
  return new ExprParser(lex(src, at)).parseAll();
}

// --- statements -----------------------------------------------------------------------------

type Node = { t: "text"; text: string } | { t: "out"; v: Val } | { t: "if"; branches: { cond: string; body: Node[] }[]; otherwise: Node[] };

function parseNodes(parts: Part[]): Node[] {
  let i = 0;
  let depth = 0;
  const block = (ends: string[]): { nodes: Node[]; end: string } => {
    const nodes: Node[] = [];
    while (i < parts.length) {
      const p = parts[i]!;
      if (p.t === "text") {
        nodes.push({ t: "text", text: p.text });
        i++;
      } else if (p.t === "out") {
        nodes.push({ t: "out", v: parseExpression(p.src, p.at + 2) });
        i++;
      } else {
        const word = /^\w+/.exec(p.src)?.[0] ?? "";
        if (ends.includes(word)) return { nodes, end: word };
        if (["elif", "else", "endif"].includes(word)) throw new UntranslatableError(`{% ${p.src} %} at ${p.at} without its {% if %}`);
        if (word !== "if") throw new UntranslatableError(`{% ${word || p.src} %} at ${p.at} (only if, elif, else and endif are translated)`);
        if (++depth > MAX_TEMPLATE_NESTING) throw new UntranslatableError(`{% if %} nested more than ${MAX_TEMPLATE_NESTING} deep`);
        const branches: { cond: string; body: Node[] }[] = [];
        let otherwise: Node[] = [];
        let tag = p;
        for (;;) {
          const cond = asBool(parseExpression(tag.src.replace(/^\w+/, ""), tag.at + 2));
          i++;
          const inner = block(["elif", "else", "endif"]);
          branches.push({ cond, body: inner.nodes });
          if (inner.end === "elif") {
            tag = parts[i] as typeof tag;
            continue;
          }
          if (inner.end === "else") {
            i++;
            const rest = block(["endif"]);
            if (rest.end !== "endif") throw new UntranslatableError(`{% if %} at ${p.at} has no {% endif %}`);
            otherwise = rest.nodes;
          }
          if (inner.end === "") throw new UntranslatableError(`{% if %} at ${p.at} has no {% endif %}`);
          const closing = parts[i] as typeof tag;
          if (closing.src.replace(/^endif/, "").trim()) throw new UntranslatableError(`{% ${closing.src} %} at ${closing.at}`);
          i++;
          break;
        }
        depth--;
        nodes.push({ t: "if", branches, otherwise });
      }
    }
    return { nodes, end: "" };
  };
  const top = block([]);
  if (i < parts.length) {
    const p = parts[i] as { src: string; at: number };
    throw new UntranslatableError(`{% ${p.src} %} at ${p.at} without its {% if %}`);
  }
  return top.nodes;
}

function nodesToString(nodes: Node[]): string {
  const pieces = nodes.map((n) => {
    if (n.t === "text") return celString(n.text);
    if (n.t === "out") return asString(n.v);
    let cel = nodesToString(n.otherwise);
    for (let b = n.branches.length - 1; b >= 0; b--) cel = `(${n.branches[b]!.cond} ? ${nodesToString(n.branches[b]!.body)} : ${cel})`;
    return cel;
  });
  if (pieces.length === 0) return "''";
  if (pieces.length === 1) return pieces[0]!;
  // A list joined keeps the syntax tree shallow where `a + b + c + …` nests once per piece.
  return `[${pieces.join(", ")}].join('')`;
}

function checked(template: string, field: "when" | "summary", f: (nodes: Node[]) => string): Translation {
  if (template.length > MAX_TEMPLATE_CHARACTERS) {
    return { ok: false, reason: `longer than ${MAX_TEMPLATE_CHARACTERS} characters` };
  }
  try {
    const cel = f(parseNodes(splitTemplate(template)));
    if (cel.length > MAPPING_LIMITS.expressionCharacters) {
      return { ok: false, reason: `its translation is longer than the ${MAPPING_LIMITS.expressionCharacters} characters an expression may have` };
    }
    // The service's own compiler has the last word (syntax depth, names, types).
    try {
      compileRules([create(CustomSourceRuleSchema, { name: "check", title: "'check'", [field]: cel })]);
    } catch (err) {
      return { ok: false, reason: `its translation is refused by the rule compiler: ${err instanceof Error ? err.message : String(err)}` };
    }
    return { ok: true, cel };
  } catch (err) {
    if (err instanceof UntranslatableError) return { ok: false, reason: err.message };
    throw err;
  }
}

/** A template that renders text (a title, a grouping key, a link) as a CEL string expression. */
export function translateText(template: string): Translation {
  return checked(template, "summary", nodesToString);
}

/**
 * A condition template (OnCall's resolve and acknowledge signals): OnCall takes the signal when
 * the rendered text, trimmed and lowercased, is `true`, `ok` or `1`. `{{ <comparison> }}` alone
 * becomes the comparison itself.
 */
export function translateCondition(template: string): Translation {
  return checked(template, "when", (nodes) => {
    const meaningful = nodes.filter((n) => !(n.t === "text" && n.text.trim() === ""));
    const only = meaningful[0];
    if (meaningful.length === 1 && only?.t === "out" && only.v.t === "bool") return only.v.cel;
    return `${nodesToString(nodes)}.trim().lowerAscii() in ['true', 'ok', '1']`;
  });
}
