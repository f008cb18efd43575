import { readFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CustomSourceRuleSchema } from "../../gen/warroom/intake/v1/custom_sources_pb.js";
import { compileRules, evaluateRules } from "../../services/cel/cel-mapping.js";

/**
 * The custom-sources guide's "Functions" section names the functions a rule may call: each one it
 * names runs in a rule's title as the guide says, `has()` and the string functions included.
 */

const PAGE = readFileSync(join(import.meta.dirname, "../../docs/how-to/custom-sources.md"), "utf8");
const SECTION = PAGE.slice(PAGE.indexOf("## Functions"), PAGE.indexOf("\n## ", PAGE.indexOf("## Functions") + 1));

/** Each documented function: an expression calling it, and the title it gives over BODY (JSON numbers are doubles). */
const EXAMPLES: Record<string, [string, string]> = {
  size: ["string(size('añb')) + string(body.list.size())", "33"],
  contains: ["'checkout'.contains('out') ? 'yes' : 'no'", "yes"],
  startsWith: ["body.tags.filter(t, t.startsWith('service:'))[0]", "service:checkout"],
  endsWith: ["'disk.sda1'.endsWith('sda1') ? 'yes' : 'no'", "yes"],
  matches: ["'host-12'.matches('^host-[0-9]+$') ? 'yes' : 'no'", "yes"],
  has: ["(has(body.service) ? 'yes' : 'no') + (has(body.missing) ? 'yes' : 'no')", "yesno"],
  all: ["body.list.all(x, x > 0.0) ? 'yes' : 'no'", "yes"],
  exists: ["body.list.exists(x, x == 2.0) ? 'yes' : 'no'", "yes"],
  exists_one: ["body.list.exists_one(x, x > 2.0) ? 'yes' : 'no'", "yes"],
  map: ["string(int(body.list.map(x, x * 2.0)[2]))", "6"],
  filter: ["string(body.list.filter(x, x > 1.0).size())", "2"],
  charAt: ["'abc'.charAt(1)", "b"],
  indexOf: ["string('abcb'.indexOf('b'))", "1"],
  lastIndexOf: ["string('abcb'.lastIndexOf('b'))", "3"],
  lowerAscii: ["'CheckOut'.lowerAscii()", "checkout"],
  upperAscii: ["'sev1'.upperAscii()", "SEV1"],
  replace: ["'a-b-c'.replace('-', '+', 1) + ' ' + 'a-b-c'.replace('-', '+', -1)", "a+b-c a+b+c"],
  split: ["'a,b,c'.split(',', 2)[1]", "b,c"],
  substring: ["'checkout'.substring(0, 5)", "check"],
  trim: ["'  checkout \\n'.trim()", "checkout"],
  join: ["body.tags.join('|')", "service:checkout|team:payments"],
  format: ["'%s has %d errors'.format([body.service, 3])", "checkout has 3 errors"],
};
const BODY = { service: "checkout", list: [1, 2, 3], tags: ["service:checkout", "team:payments"] };

function titleOf(expression: string): string | undefined {
  const compiled = compileRules([create(CustomSourceRuleSchema, { title: expression })]);
  const result = evaluateRules(compiled, { body: BODY, headers: {}, query: {}, receivedAt: new Date("2026-12-01T00:00:00Z") });
  expect(result.error, expression).toBeUndefined();
  return result.fields?.title;
}

describe("the functions the custom-sources guide documents", () => {
  const documented = [...new Set([...SECTION.matchAll(/`([A-Za-z_]+)`/g)].map((m) => m[1]!))];

  it("names has() and the strings extension's functions", () => {
    for (const name of ["has", "charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split", "substring", "trim", "join", "format"]) {
      expect(documented, name).toContain(name);
    }
  });

  it("each one runs in a rule as documented", () => {
    expect(documented.filter((name) => !(name in EXAMPLES))).toEqual([]);
    for (const name of documented) {
      const [expression, title] = EXAMPLES[name]!;
      expect(titleOf(expression), name).toBe(title);
    }
  });
});
