import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CustomSourceRuleSchema, type CustomSourceRule } from "../../gen/warroom/intake/v1/custom_sources_pb.js";
import { compileRules, evaluateRules, MAPPING_LIMITS, type MappingInput } from "./cel-mapping.js";

type RuleInit = Partial<Omit<CustomSourceRule, "$typeName">>;

function rule(init: RuleInit): CustomSourceRule {
  return create(CustomSourceRuleSchema, init);
}

function input(body: unknown, extra: Partial<MappingInput> = {}): MappingInput {
  return { body, headers: {}, query: {}, receivedAt: new Date("2026-11-26T03:00:00Z"), ...extra };
}

const ZABBIX_LIKE = [
  rule({ name: "maintenance", when: "body.status == 'MAINTENANCE'", kind: "'ignore'", ignoreReason: "'host in maintenance'" }),
  rule({
    name: "problem",
    when: "body.status == 'PROBLEM'",
    title: "body.name",
    severity: "body.priority == 'Disaster' ? 'sev1' : 'sev3'",
    attachKey: "body.host + '/' + body.trigger",
    eventId: "string(body.eventid)",
    entity: "{'kind': 'host', 'id': body.host}",
    summary: "'seen ' + string(size(body.items)) + ' items'",
    link: "'https://zabbix.example.com/tr_events.php?eventid=' + string(body.eventid)",
  }),
  rule({
    name: "resolved",
    when: "body.status == 'RESOLVED'",
    kind: "'recovery'",
    attachKey: "body.host + '/' + body.trigger",
    eventId: "'r' + string(body.eventid)",
  }),
];

describe("custom-source rules", () => {
  it("maps with the first rule whose condition holds, and says why the others did not", () => {
    const compiled = compileRules(ZABBIX_LIKE);
    const result = evaluateRules(
      compiled,
      input({ status: "PROBLEM", name: "Disk full", priority: "Disaster", host: "db1", trigger: "disk", eventid: 42, items: [1, 2] }),
    );
    expect(result.error).toBeUndefined();
    expect(result.matchedRule).toBe("problem");
    expect(result.fields).toEqual({
      kind: "trigger",
      title: "Disk full",
      severity: "sev1",
      attachKey: "db1/disk",
      eventId: "42",
      entity: { kind: "host", id: "db1" },
      summary: "seen 2 items",
      link: "https://zabbix.example.com/tr_events.php?eventid=42",
    });
    expect(result.verdicts).toEqual([
      { rule: "maintenance", matched: false, reason: "condition is false" },
      { rule: "problem", matched: true, reason: "condition is true" },
      { rule: "resolved", matched: false, reason: 'not tried: rule "problem" matched first' },
    ]);
  });

  it("drops on purpose with the rule's reason", () => {
    const result = evaluateRules(compileRules(ZABBIX_LIKE), input({ status: "MAINTENANCE" }));
    expect(result.fields).toMatchObject({ kind: "ignore", ignoreReason: "host in maintenance" });
  });

  it("turns an empty or null attach key into no key, with a warning", () => {
    const compiled = compileRules([rule({ title: "'t'", attachKey: "has(body.k) ? body.k : null" })]);
    for (const body of [{ k: "" }, { k: "  " }, {}]) {
      const result = evaluateRules(compiled, input(body));
      expect(result.fields?.attachKey).toBe("");
      expect(result.warnings).toEqual(["attachKey was empty or null: this delivery has no attach key and opens its own incident"]);
    }
  });

  it("fails a wrong type instead of converting it", () => {
    const compiled = compileRules([rule({ title: "body.n", attachKey: "body.n" })]);
    expect(evaluateRules(compiled, input({ n: 5 })).error).toBe('rule "rule 1": title yielded double, not a string');
  });

  it("reports no match, and a condition that errored, as an error", () => {
    const compiled = compileRules([rule({ when: "body.status == 'x'", title: "'t'" })]);
    expect(evaluateRules(compiled, input({ status: "y" })).error).toBe("no rule matched");
    expect(evaluateRules(compiled, input({})).error).toMatch(/^no rule matched \(rule 1: condition failed: /);
  });

  it("refuses at save what cannot compile, names that do not exist, and wrong constants", () => {
    const refusals: [RuleInit, RegExp][] = [
      [{ title: "body.(" }, /rules\[0\]\.title: does not compile/],
      [{ title: "payload.name" }, /unknown name "payload"/],
      [{ title: "system('rm')" }, /unknown function "system"/],
      [{ title: "__meter('x')" }, /unknown function "__meter"/],
      [{ title: "'t'", severity: "'sev9'" }, /severity: must be one of sev1/],
      [{ title: "'t'", kind: "'resolve'" }, /kind: must be one of trigger/],
      [{ title: "42" }, /title: must yield a string, not int64/],
      [{ title: "'t'", when: "'yes'" }, /when: must yield a bool/],
      [{ title: "'t'", entity: "'host'" }, /entity: must yield a map/],
      [{ kind: "'trigger'" }, /title: required/],
      [{ title: `'${"x".repeat(MAPPING_LIMITS.expressionCharacters)}'` }, /at most 2048 characters/],
      [{ title: `string(${"-(".repeat(600)}1${")".repeat(600)})` }, /nested deeper than 48 levels|nested too deeply/],
      [{ title: "string([1].map(a, [1].map(b, [1].map(c, c))))" }, /macros .* nested more than 2 deep/],
    ];
    for (const [init, message] of refusals) expect(() => compileRules([rule(init)]), JSON.stringify(init)).toThrow(message);
    expect(() => compileRules([])).toThrow(/at least one rule/);
    expect(() => compileRules(Array.from({ length: 21 }, (_, i) => rule({ name: `r${i}`, title: "'t'" })))).toThrow(/at most 20 rules/);
  });

  it("refuses deep nesting the same way however warm the parser is", () => {
    // The parser recurses once per bracket. Cold, 600 levels overflow the stack; once the JIT has
    // compiled the parser they parse, and brackets around a constant leave no depth to count, so
    // the same rule was refused by one replica and saved by another.
    for (let i = 0; i < 3000; i++) compileRules([rule({ title: `string((((${i}))) + -(-(${i})))`, when: `body.n == ${i} || (body.m[0] in [1, 2])` })]);
    const deep = [
      `string(${"(".repeat(600)}1${")".repeat(600)})`,
      `string(${"-(".repeat(600)}1${")".repeat(600)})`,
      `${"[".repeat(300)}'t'${"]".repeat(300)}[0]`,
    ];
    for (const title of deep) expect(() => compileRules([rule({ title })]), title.slice(0, 20)).toThrow(/title: nested deeper than 48 levels/);
    // Brackets inside string literals and comments are text, not nesting.
    const quoted = (q: string) => `${q}${"(".repeat(100)}${q} + ${q}${"[".repeat(100)}${q}`;
    for (const title of [quoted("'"), quoted('"'), quoted("'''"), `r'\\' + ${quoted('"')}`, `'\\'' + ${quoted("'")}`, `// ${"(".repeat(60)}\n't'`])
      expect(() => compileRules([rule({ title })]), title).not.toThrow();
    expect(() => compileRules([rule({ title: `string(${"(".repeat(40)}1${")".repeat(40)})` })])).not.toThrow();
  });

  it("stops a hostile expression within its cost budget", () => {
    const big = { list: Array.from({ length: 20_000 }, (_, i) => ({ a: i })), s: "x".repeat(60_000) };
    const hostile = [
      "string(body.list.map(x, body.list.map(y, y.a + x.a)).size())",
      "body.list.map(x, body.s).join('')",
      "body.list.all(x, body.list.exists(y, y.a == -1)) ? 't' : 'f'",
      "body.s + body.s + body.s + body.s + body.s + body.s + body.s + body.s + body.s + body.s",
      "false || body.list.exists(x, body.list.exists(y, y.a < 0)) ? 't' : 'f'",
    ];
    for (const title of hostile) {
      const started = performance.now();
      const result = evaluateRules(compileRules([rule({ title })]), input(big));
      const took = performance.now() - started;
      // The budget stops them; on a machine too loaded to reach it in time, the time bound does.
      expect(result.error ?? result.fields?.title, title).toMatch(/cost budget of 20000 exceeded|ran past its time bound|yields a string of/);
      // The budget is counted in cost units, not time, so this bound only tells a stop from a hang:
      // unmetered, the first expression alone walks 400 million elements (minutes); metered, it
      // stops in milliseconds. Ten seconds is far above that on any machine, however busy.
      expect(took, title).toBeLessThan(10_000);
    }
  });

  it("reads only the payload's own keys, never a prototype's", () => {
    const compiled = compileRules([rule({ title: "string(body.constructor)" })]);
    expect(evaluateRules(compiled, input({ a: 1 })).error).toMatch(/title failed/);
    const own = compileRules([rule({ title: "body['__proto__']" })]);
    expect(evaluateRules(own, input(JSON.parse('{"__proto__": "own"}'))).fields?.title).toBe("own");
  });

  it("reads headers, query and the time of receipt", () => {
    const compiled = compileRules([rule({ title: "headers['x-env'] + ' ' + query['team'] + ' ' + string(receivedAt)" })]);
    const result = evaluateRules(compiled, input({}, { headers: { "x-env": "prod" }, query: { team: "db" } }));
    expect(result.fields?.title).toBe("prod db 2026-11-26T03:00:00Z");
  });
});
