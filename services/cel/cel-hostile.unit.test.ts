import { create } from "@bufbuild/protobuf";
import { CelScalar } from "@bufbuild/cel";
import { describe, expect, it, vi } from "vitest";
import { CustomSourceRuleSchema } from "../../gen/warroom/intake/v1/custom_sources_pb.js";
import { compileMetered, compileRules, evaluateMetered, evaluateRules, fromCelValue, MAPPING_LIMITS, meteredEnvironment, toCelInput } from "./cel-mapping.js";
import { BudgetExceeded, chargeUnits, meterStopped, meterUsage, SANDBOX_LIMITS, startMeter } from "./cel-meter.js";

const LIMIT = SANDBOX_LIMITS.stringCharacters;
const BUDGET = MAPPING_LIMITS.costPerDelivery;

/** A payload at the bounds rules accept: strings of 64 KiB, a list of ten thousand, a map of ten thousand. */
const body = {
  s: "ab\n".repeat(LIMIT / 4) + "x".repeat(LIMIT / 4),
  a: `${"a".repeat(LIMIT - 1)}!`,
  needle: `${"a".repeat(1000)}b`,
  digits: "9".repeat(LIMIT),
  list: Array.from({ length: 10_000 }, (_, i) => i),
  words: Array.from({ length: 10_000 }, (_, i) => `w${i}`),
  m: Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`k${i}`, i])),
  pattern: "(a|b)".repeat(100),
};

function evaluate(title: string, payload: unknown = body) {
  const compiled = compileRules([create(CustomSourceRuleSchema, { title })]);
  const started = performance.now();
  const result = evaluateRules(compiled, { body: payload, headers: {}, query: {}, receivedAt: new Date("2026-12-01T00:00:00Z") });
  return { result, took: performance.now() - started, usage: meterUsage() };
}

// The cost budget stops these; on a machine so loaded that the budget is not reached within the
// evaluation's time bound, the time bound stops them instead: either is the end asked for.
const STOPPED = new RegExp(`cost budget of ${BUDGET} exceeded|ran past its time bound of ${SANDBOX_LIMITS.evaluationMs} ms`);
// A hang detector, not a budget: the quadratic versions of these ran for seconds to minutes.
const HANG_MS = 5_000;

describe("a hostile expression over every function of the CEL environment", () => {
  // [function, expression, how it ends]
  const cases: [string, string, RegExp][] = [
    ["replace", "string(body.list.map(x, body.s.replace('\\n', ' ')).size())", STOPPED],
    ["replace (growing)", "body.s.replace('a', body.s)", /replace would yield a string of \d+ characters; at most 65536/],
    ["replace (nested)", "body.s.replace('', body.s).replace('', body.s)", /replace would yield a string of \d+ characters/],
    ["replace (count)", "string(body.list.map(x, body.s.replace('\\n', ' ', 1000)).size())", STOPPED],
    ["split", "string(body.list.map(x, body.s.split('\\n')).size())", STOPPED],
    ["split (code points)", "string(body.list.map(x, body.s.split('')).size())", STOPPED],
    ["join", "body.words.join(body.s)", /join would yield a string of \d+ characters; at most 65536/],
    ["join (loop)", "string(body.list.map(x, body.words.join(',')).size())", STOPPED],
    ["lowerAscii", "string(body.list.map(x, body.s.lowerAscii()).size())", STOPPED],
    ["upperAscii", "string(body.list.map(x, body.s.upperAscii()).size())", STOPPED],
    ["indexOf", "string(body.list.map(x, body.a.indexOf(body.needle)).size())", STOPPED],
    ["lastIndexOf", "string(body.list.map(x, body.a.lastIndexOf(body.needle)).size())", STOPPED],
    ["substring", "string(body.list.map(x, body.s.substring(1)).size())", STOPPED],
    ["charAt", "string(body.list.map(x, body.s.charAt(1000)).size())", STOPPED],
    ["trim", "string(body.list.map(x, body.s.trim()).size())", STOPPED],
    ["format", "string(body.list.map(x, '%s'.format([body.m])).size())", STOPPED],
    ["format (growing)", "'%s%s'.format([body.s, body.s])", /yields a string of 131072; at most 65536/],
    ["matches (catastrophic for a backtracking engine)", "string(body.list.map(x, body.a.matches('^(a+)+$')).size())", STOPPED],
    ["matches (pattern from the payload)", "string(body.s.matches(body.pattern))", /a pattern of 500 characters; at most 256/],
    ["matches (counted repetitions)", "string(body.s.matches('(x{1000}){999}'))", STOPPED],
    ["matches (repetitions past RE2's bound)", "string('x'.matches('(x{1000}){1000}'))", /invalid repeat count/],
    ["size", "string(body.list.map(x, size(body.s)).size())", STOPPED],
    ["contains", "string(body.list.map(x, body.a.contains(body.needle)).size())", STOPPED],
    ["startsWith", "string(body.list.map(x, body.a.startsWith(body.a)).size())", STOPPED],
    ["endsWith", "string(body.list.map(x, body.a.endsWith(body.a)).size())", STOPPED],
    ["string +", "body.s + body.s", /yields a string of 131072; at most 65536/],
    ["string + in a loop", "string(body.list.map(x, body.s.substring(10) + 'x').size())", STOPPED],
    ["list +", "string((body.list + body.list + body.list + body.list + body.list + body.list + body.list + body.list).size())", STOPPED],
    ["list + in a loop", "string(body.list.map(x, body.list + body.list).size())", STOPPED],
    ["in (list)", "string(body.list.map(x, x in body.list).size())", STOPPED],
    ["in (map)", "string(body.list.map(x, 1 in body.m).size())", STOPPED],
    ["== (deep)", "string(body.list.map(x, body == body).size())", STOPPED],
    ["!= (deep)", "string(body.list.map(x, body.words != body.words).size())", STOPPED],
    ["< (strings)", "string(body.list.map(x, body.a < body.a).size())", STOPPED],
    ["int (a long string)", "string(int(body.digits))", /int: cannot convert a string of 65536 characters/],
    ["double", "string(body.list.map(x, double(body.digits)).size())", STOPPED],
    ["bytes", "string(body.list.map(x, bytes(body.s)).size())", STOPPED],
    ["time zone", "string(body.list.map(x, receivedAt.getHours('America/New_York')).size())", STOPPED],
    ["map in map", "string(body.list.map(x, body.list.map(y, y)).size())", STOPPED],
    ["filter in exists", "body.list.exists(x, body.list.filter(y, y == x).size() > 1) ? 't' : 'f'", STOPPED],
    ["all in all", "body.list.all(x, body.list.all(y, y >= 0)) ? 't' : 'f'", STOPPED],
    ["exists_one", "body.list.exists_one(x, body.words.exists_one(y, y == 'none')) ? 't' : 'f'", STOPPED],
    ["map over a map's keys", "string(body.m.map(k, body.m.map(j, j)).size())", STOPPED],
    ["an error absorbed by ||", "body.list.all(x, body.list.exists(y, false) || true) ? 't' : 'f'", STOPPED],
  ];

  for (const [name, title, ends] of cases) {
    it(`${name}: ${title}`, () => {
      const { result, took, usage } = evaluate(title);
      expect(result.error, JSON.stringify(result.fields?.title?.slice(0, 80))).toMatch(ends);
      if (ends === STOPPED && result.error?.startsWith("cost budget")) {
        // Stopped by cost: everything charged was charged before it ran, so the units spent pass
        // the budget by at most the one charge that was refused.
        expect(usage.spent).toBeGreaterThan(BUDGET);
      }
      expect(took).toBeLessThan(HANG_MS);
    });
  }

  it("charges a call before it runs: one that would cost more than the budget never starts", () => {
    const { result, usage } = evaluate("string(body.s.matches('((a|b|c)+x)+y'))");
    expect(result.error).toMatch(/cost budget of 20000 exceeded/);
    // The first charges (reading `body.s`, the call itself) already spent it: nothing after.
    expect(usage.charges).toBeLessThanOrEqual(2);
    expect(usage.spent).toBeGreaterThan(BUDGET);
  });

  it("stops an evaluation that runs past its wall-clock bound at its next charge, and every charge after", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    try {
      startMeter(1_000_000);
      chargeUnits(1);
      vi.advanceTimersByTime(SANDBOX_LIMITS.evaluationMs + 1);
      // The clock is read every 16th charge, and at every large one.
      expect(() => chargeUnits(64)).toThrow(BudgetExceeded);
      expect(meterStopped()).toBe(`evaluation ran past its time bound of ${SANDBOX_LIMITS.evaluationMs} ms`);
      expect(() => chargeUnits(1)).toThrow(/time bound/);
    } finally {
      vi.useRealTimers();
    }
  });

  it("refuses, by name, a string longer than 64 KiB in the payload, before any rule runs", () => {
    const { result } = evaluate("body.message.replace('\\n', ' ')", { alerts: [{ ok: "x", message: "x\n".repeat(512 * 1024) }] });
    expect(result.error).toBe("body.alerts[0].message is a string of 1048576 characters; rules read strings of at most 65536 (64 KiB)");
    expect(result.verdicts).toEqual([{ rule: "rule 1", matched: false, reason: "not tried: the payload has a string too long for rules" }]);
    // A key is a string too, and headers are read as well.
    expect(evaluate("'t'", { ["k".repeat(LIMIT + 1)]: 1 }).result.error).toMatch(/^a key of body is a string of 65537 characters/);
    const headers = evaluateRules(compileRules([create(CustomSourceRuleSchema, { title: "'t'" })]), {
      body: {},
      headers: { "x-big": "h".repeat(LIMIT + 1) },
      query: {},
      receivedAt: new Date(),
    });
    expect(headers.error).toMatch(/^headers\["x-big"\] is a string of 65537 characters/);
    // At the bound it is read.
    expect(evaluate("string(size(body.a))").result.fields?.title).toBe(String(LIMIT));
  });

  it("refuses at save the strings functions this environment does not expose", () => {
    for (const title of ["strings.quote(body.s)", "body.s.reverse()"]) {
      expect(() => compileRules([create(CustomSourceRuleSchema, { title })]), title).toThrow(/unknown function/);
    }
    expect(() => compileRules([create(CustomSourceRuleSchema, { title: "__meter_append([], [1])" })])).toThrow(/unknown function "__meter_append"/);
    expect(() => compileRules([create(CustomSourceRuleSchema, { title: "string(__meter_live)" })])).toThrow(/unknown name "__meter_live"/);
  });

  it("bounds an investigation template the same way (compileMetered, evaluateMetered)", () => {
    const environment = meteredEnvironment({ incident: CelScalar.DYN }, 2_000);
    const program = compileMetered(environment, "incident.list.map(x, incident.s.replace('\\n', ' '))", "template");
    const started = performance.now();
    const result = evaluateMetered(environment, program, { incident: toCelInput({ list: body.list, s: body.s }) });
    expect(result).toEqual({ error: expect.stringMatching(/cost budget of 2000 exceeded|time bound/) });
    expect(performance.now() - started).toBeLessThan(HANG_MS);
  });
});

describe("the environment's own implementations keep the strings extension's meaning", () => {
  const value = (expression: string, payload: unknown = {}) => {
    const environment = meteredEnvironment({ body: CelScalar.DYN }, 20_000);
    const result = evaluateMetered(environment, compileMetered(environment, expression, "test"), { body: toCelInput(payload) });
    if ("error" in result) throw new Error(result.error);
    return fromCelValue(result.value);
  };

  it("replace: all, the first n, a negative n for all, an empty string between code points", () => {
    expect(value("'a-b-c'.replace('-', '+')")).toBe("a+b+c");
    expect(value("'a-b-c'.replace('-', '+', 1)")).toBe("a+b-c");
    expect(value("'a-b-c'.replace('-', '+', 0)")).toBe("a-b-c");
    expect(value("'a-b-c'.replace('-', '+', -1)")).toBe("a+b+c");
    expect(value("'abc'.replace('', '.')")).toBe(".a.b.c.");
    expect(value("'abc'.replace('', '.', 2)")).toBe(".a.bc");
    expect(value("'a😀b'.replace('', '|')")).toBe("|a|😀|b|");
    expect(value("'aaa'.replace('aa', 'b')")).toBe("ba");
    expect(value("'abc'.replace('x', 'y')")).toBe("abc");
  });

  it("split: all, at most n with the rest last, none for n of 0, code points for an empty separator", () => {
    expect(value("'a,b,c'.split(',')")).toEqual(["a", "b", "c"]);
    expect(value("'a,b,c'.split(',', 2)")).toEqual(["a", "b,c"]);
    expect(value("'a,b,c'.split(',', 0)")).toEqual([]);
    expect(value("'a,b,c'.split(',', -1)")).toEqual(["a", "b", "c"]);
    expect(value("'a😀c'.split('')")).toEqual(["a", "😀", "c"]);
    expect(value("'abc'.split('', 2)")).toEqual(["a", "bc"]);
    expect(value("''.split(',')")).toEqual([""]);
    expect(value("'a,,b'.split(',')")).toEqual(["a", "", "b"]);
  });

  it("join, lowerAscii, upperAscii, size", () => {
    expect(value("['a', 'b'].join()")).toBe("ab");
    expect(value("['a', 'b'].join(', ')")).toBe("a, b");
    expect(() => value("['a', 1].join()")).toThrow(/non-string/);
    expect(value("'ÀbC-z'.lowerAscii()")).toBe("Àbc-z");
    expect(value("'àbC-z'.upperAscii()")).toBe("àBC-Z");
    expect(value("size('a😀c')")).toBe(3);
    expect(value("'a😀c'.size()")).toBe(3);
  });

  it("map and filter build their lists in place without sharing them", () => {
    expect(value("[1, 2, 3].map(x, [x].map(y, y * 2))")).toEqual([[2], [4], [6]]);
    expect(value("[1, 2, 3, 4].filter(x, x % 2 == 0).map(x, x + 1)")).toEqual([3, 5]);
    expect(value("[[1], [2]].map(l, l + [0])")).toEqual([
      [1, 0],
      [2, 0],
    ]);
    expect(value("[1, 2].map(x, [0].map(y, x))")).toEqual([[1], [2]]);
    expect(value("body.list.map(x, x).filter(x, x >= 0).size()", { list: body.list.slice(0, 200) })).toBe(200);
  });
});
