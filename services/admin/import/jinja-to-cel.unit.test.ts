import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { CustomSourceRuleSchema } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import { compileRules, evaluateRules } from "../../cel/cel-mapping.js";
import { MAX_TEMPLATE_CHARACTERS, translateCondition, translateText } from "./jinja-to-cel.js";

// Each translation is run by the service's own rule engine on payloads, and compared with what
// Jinja2 renders for the same template and payload (written out by hand below).

function cel(t: { ok: true; cel: string } | { ok: false; reason: string }): string {
  if (!t.ok) throw new Error(`not translated: ${t.reason}`);
  return t.cel;
}

/** The text a translated template yields for a payload, through the rule engine. */
function render(template: string, body: unknown): string {
  // The summary, which may be empty (a title may not).
  const rules = compileRules([create(CustomSourceRuleSchema, { name: "t", title: "'t'", summary: cel(translateText(template)) })]);
  const result = evaluateRules(rules, { body, headers: {}, query: {}, receivedAt: new Date() });
  if (result.error) throw new Error(result.error);
  return result.fields!.summary ?? "";
}

/** Whether a translated condition holds for a payload. */
function holds(template: string, body: unknown): boolean {
  const rules = compileRules([
    create(CustomSourceRuleSchema, { name: "c", when: cel(translateCondition(template)), title: "'yes'" }),
    create(CustomSourceRuleSchema, { name: "otherwise", title: "'no'" }),
  ]);
  const result = evaluateRules(rules, { body, headers: {}, query: {}, receivedAt: new Date() });
  if (result.error) throw new Error(result.error);
  return result.matchedRule === "c";
}

function refused(t: { ok: boolean; reason?: string }): string {
  expect(t.ok).toBe(false);
  return (t as { reason: string }).reason;
}

describe("text templates", () => {
  it("keeps plain text, and reads payload keys by dot and by bracket", () => {
    expect(render("Disk full", {})).toBe("Disk full");
    expect(render("{{ payload.title }}", { title: "CPU high" })).toBe("CPU high");
    expect(render("{{ payload[\"alert-name\"] }} on {{ payload['host'] }}", { "alert-name": "Load", host: "db1" })).toBe("Load on db1");
    expect(render("{{ payload.labels.instance }}/{{ payload.alerts[0].status }}", { labels: { instance: "a:9100" }, alerts: [{ status: "firing" }] })).toBe(
      "a:9100/firing",
    );
  });

  it("renders a missing key as nothing, as Jinja does, instead of failing", () => {
    expect(render("[{{ payload.title }}]", {})).toBe("[]");
    expect(render("[{{ payload.a.b.c }}]", { a: {} })).toBe("[]");
    expect(render("[{{ payload.alerts[3].status }}]", { alerts: [] })).toBe("[]");
  });

  it("prints numbers and booleans as Jinja does", () => {
    expect(render("{{ payload.n }} used", { n: 97 })).toBe("97 used");
    expect(render("{{ 3 }} {{ true }} {{ none }}", {})).toBe("3 True None");
  });

  it("applies default only when the key is missing", () => {
    expect(render('{{ payload.title | default("Untitled") }}', {})).toBe("Untitled");
    expect(render('{{ payload.title | default("Untitled") }}', { title: "" })).toBe("");
    expect(render('{{ payload.title|d("x") }}', { title: "t" })).toBe("t");
    expect(render('{{ payload.get("title", "none given") }}', {})).toBe("none given");
    expect(render('{{ payload.get("title") }}', {})).toBe("None");
  });

  it("translates if, elif and else with ==, !=, and, or, not and parentheses", () => {
    const t = '{% if payload.state == "alerting" %}FIRING{% elif payload.state == "ok" %}OK{% else %}{{ payload.state }}{% endif %}';
    expect(render(t, { state: "alerting" })).toBe("FIRING");
    expect(render(t, { state: "ok" })).toBe("OK");
    expect(render(t, { state: "no_data" })).toBe("no_data");
    expect(render(t, {})).toBe("");
    const both = '{% if (payload.a == 1 or payload.b != "x") and not payload.c == true %}y{% endif %}';
    expect(render(both, { a: 1, b: "x", c: false })).toBe("y");
    expect(render(both, { a: 2, b: "x" })).toBe("");
    expect(render(both, { a: 2, b: "z", c: true })).toBe("");
  });

  it("honours whitespace control and drops comments", () => {
    expect(render("a  {%- if payload.x == 1 -%}  b  {%- endif -%}  c{# note #}", { x: 1 })).toBe("abc");
    expect(render("{{- payload.x -}}", { x: "v" })).toBe("v");
  });

  it("escapes quotes and backslashes in text and strings", () => {
    expect(render("it's \\ {{ payload.x }}", { x: "a'b" })).toBe("it's \\ a'b");
    expect(render('{{ payload.x | default("say \\"hi\\"") }}', {})).toBe('say "hi"');
  });
});

describe("condition templates (OnCall's resolve signal)", () => {
  it("a single comparison becomes the condition", () => {
    expect(holds('{{ payload.state == "ok" }}', { state: "ok" })).toBe(true);
    expect(holds('{{ payload.state == "ok" }}', { state: "alerting" })).toBe(false);
    expect(holds('{{ payload.state == "ok" }}', {})).toBe(false);
    expect(holds('{{ payload.state != "ok" }}', {})).toBe(true);
    expect(cel(translateCondition('{{ payload.status == "resolved" }}'))).toBe("('status' in body && body.status == 'resolved')");
  });

  it("rendered text counts as OnCall counts it: true, ok or 1, any case, spaces trimmed", () => {
    const t = '{% if payload.status == "resolved" %} True {% else %}false{% endif %}';
    expect(holds(t, { status: "resolved" })).toBe(true);
    expect(holds(t, { status: "firing" })).toBe(false);
    expect(holds("{{ payload.code }}", { code: "OK" })).toBe(true);
    expect(holds("{{ payload.code }}", { code: 1 })).toBe(true);
    expect(holds("{{ payload.code }}", { code: "nope" })).toBe(false);
  });
});

describe("what is not translated, with the reason", () => {
  it("other filters, variables, methods, tags and loops", () => {
    expect(refused(translateText("{{ payload.labels | tojson }}"))).toContain('filter "tojson"');
    expect(refused(translateText("{{ payload.name | upper }}"))).toContain('filter "upper"');
    expect(refused(translateText("{{ grafana_oncall_link }}"))).toContain('variable "grafana_oncall_link"');
    expect(refused(translateText("{{ payload.name.split(',') }}"))).toContain('method "split"');
    expect(refused(translateText("{% for a in payload.alerts %}{{ a }}{% endfor %}"))).toContain("{% for");
    expect(refused(translateText("{% set x = 1 %}"))).toContain("{% set");
    expect(refused(translateText("{{ payload.n + 1 }}"))).toContain('"+"');
    expect(refused(translateText("{{ payload.n > 1 }}"))).toContain('">"');
    expect(refused(translateText('{{ payload.x | default("a", true) }}'))).toContain("second argument");
    expect(refused(translateText("{{ payload }}"))).toContain("whole payload");
  });

  it("a bare value as a condition (its truthiness depends on its type)", () => {
    expect(refused(translateText("{% if payload.x %}y{% endif %}"))).toContain("truthiness");
  });

  it("broken templates", () => {
    expect(refused(translateText("{{ payload.x"))).toContain("never closed");
    expect(refused(translateText("{% if payload.x == 1 %}y"))).toContain("no {% endif %}");
    expect(refused(translateText("y{% endif %}"))).toContain("without its {% if %}");
    expect(refused(translateText('{{ payload.x == "a }}'))).toContain("never closed");
    expect(refused(translateText("{{ }}"))).toContain("a value expected");
    expect(refused(translateText("{{ payload. }}"))).toContain("a key expected");
  });
});

describe("hostile input is bounded", () => {
  it("refuses a huge template without reading it", () => {
    const huge = "{{ payload.x }}".repeat(MAX_TEMPLATE_CHARACTERS);
    const started = performance.now();
    expect(refused(translateText(huge))).toContain(`longer than ${MAX_TEMPLATE_CHARACTERS} characters`);
    expect(performance.now() - started).toBeLessThan(50);
  });

  it("refuses deep nesting of ifs, parentheses and not", () => {
    const ifs = `${"{% if payload.a == 1 %}".repeat(50)}x${"{% endif %}".repeat(50)}`;
    expect(refused(translateText(ifs))).toContain("nested more than");
    expect(refused(translateCondition(`{{ ${"(".repeat(200)}payload.a == 1${")".repeat(200)} }}`))).toContain("nested more than");
    expect(refused(translateCondition(`{{ ${"not ".repeat(200)}payload.a == 1 }}`))).toContain("nested more than");
  });

  it("refuses what would exceed the service's expression limits", () => {
    const long = Array.from({ length: 60 }, (_, i) => `{{ payload.field_${i}.value }}`).join(" ");
    expect(refused(translateText(long))).toMatch(/longer than the 2048 characters|refused by the rule compiler/);
    const chain = `{{ ${Array.from({ length: 60 }, (_, i) => `payload.a == ${i}`).join(" or ")} }}`;
    expect(translateCondition(chain).ok).toBe(false);
  });

  it("never lets a quote or backslash out of a string literal", () => {
    for (const evil of ["'", "\\", "' + body.secret + '", "\\' || true || '", "\n"]) {
      expect(render(`${evil}{{ payload.x | default("${evil.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}") }}`, {})).toBe(evil + evil);
    }
  });
});
