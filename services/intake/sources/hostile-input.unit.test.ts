import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { AlertSchema } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { alertRouterSource, chatSource, PayloadError, recognizeTrigger, SHARED_TRIGGER_ORDER } from "./index.js";
import type { TriggerSource } from "./types.js";

const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const fixture = (name: string): any => JSON.parse(readFileSync(join(repoRoot, "test/fixtures", name), "utf8"));
const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };
const ALL_SOURCES: TriggerSource[] = [...SHARED_TRIGGER_ORDER, alertRouterSource, chatSource];

const FIXTURES = [
  "datadog/custom-body-triggered.json",
  "aws/eventbridge-cloudwatch-alarm-state-change.json",
  "aws/sns-notification-cloudwatch-alarm.json",
  "azure/common-schema-metric-alert-resolved.json",
  "azure/common-schema-log-alerts-v2-fired.json",
  "sentry/event-alert-triggered.json",
  "sentry/legacy-webhooks-plugin.json",
  "alertmanager/webhook-v4-firing.json",
];

const WEIRD_VALUES: unknown[] = [
  null,
  0,
  -1,
  1e308,
  true,
  "",
  "   ",
  "\u0000",
  "\uD800",
  [],
  [null, 1, "x", {}],
  {},
  { nested: { deeper: [1, 2, 3] } },
  JSON.parse('{"__proto__": {"polluted": true}}'),
];

/**
 * The contract for hostile input: recognize returns a boolean, map returns a delivery or throws a
 * PayloadError, and a returned alert is a valid message that serializes both ways.
 */
function exercise(source: TriggerSource, body: unknown): void {
  // Plain checks rather than `expect` per call: the sweeps below make tens of thousands of calls.
  const recognized = source.recognize(body);
  if (typeof recognized !== "boolean") throw new Error(`${source.badge}.recognize returned ${String(recognized)}`);
  let delivery: ReturnType<TriggerSource["map"]>;
  try {
    delivery = source.map(body, context);
  } catch (error) {
    if (error instanceof PayloadError) return;
    throw new Error(`${source.badge}.map threw ${String(error)}`, { cause: error });
  }
  if (delivery.alert) {
    const message = create(AlertSchema, delivery.alert);
    toBinary(AlertSchema, message);
    const json = toJsonString(AlertSchema, message);
    if (json.includes("\\u0000")) throw new Error(`${source.badge} kept a NUL`);
  }
}

/** Every path to a value inside the body, down to a few levels. */
function paths(value: unknown, prefix: (string | number)[] = [], depth = 0): (string | number)[][] {
  if (depth > 4 || value === null || typeof value !== "object") return [];
  const entries = Array.isArray(value) ? value.slice(0, 3).map((item, index) => [index, item] as const) : Object.entries(value);
  return entries.flatMap(([key, child]) => [[...prefix, key], ...paths(child, [...prefix, key], depth + 1)]);
}

function withValueAt(body: unknown, path: (string | number)[], value: unknown): unknown {
  const copy = structuredClone(body) as any;
  let target = copy;
  for (const key of path.slice(0, -1)) target = target[key];
  target[path[path.length - 1] as string] = value;
  return copy;
}

describe("hostile input never crashes a mapping", () => {
  it.each<[string, unknown, string | undefined]>([
    ["undefined", undefined, undefined],
    ["null", null, undefined],
    ["number", 7, undefined],
    ["string", "alert_type", undefined],
    ["boolean", true, undefined],
    ["array", [{ alert_type: "error" }], undefined],
    ["empty object", {}, undefined],
    ["__proto__ only", JSON.parse('{"__proto__": {"alert_type": "error", "serviceSource": "remote", "groupKey": "g"}}'), undefined],
    ["constructor keys", JSON.parse('{"constructor": {"prototype": {"x": 1}}, "alert_type": "error", "toString": 5, "hasOwnProperty": 1}'), "metrics-monitor"],
    ["deeply nested", JSON.parse(`${"[".repeat(5000)}${"]".repeat(5000)}`), undefined],
    ["deeply nested object", JSON.parse(`${'{"data":'.repeat(3000)}{}${"}".repeat(3000)}`), undefined],
  ])("%s", (_name, body, badge) => {
    for (const source of ALL_SOURCES) exercise(source, body);
    expect(recognizeTrigger(body)?.badge).toBe(badge);
  });

  it.each(FIXTURES)("every field of %s replaced by wrong types", (file) => {
    const body = fixture(file);
    for (const path of paths(body)) {
      for (const value of WEIRD_VALUES) {
        const mutated = withValueAt(body, path, value);
        for (const source of ALL_SOURCES) exercise(source, mutated);
      }
    }
  });

  it("the SNS message decoded from its string is attacked the same way", () => {
    const envelope = fixture("aws/sns-notification-cloudwatch-alarm.json");
    const message = JSON.parse(envelope.Message);
    for (const path of paths(message)) {
      for (const value of WEIRD_VALUES) {
        const body = { ...envelope, Message: JSON.stringify(withValueAt(message, path, value)) };
        for (const source of ALL_SOURCES) exercise(source, body);
      }
    }
  });

  it("remote payloads with every field of the wrong type", () => {
    const payload = {
      serviceSource: "remote",
      connectionId: "c",
      title: "t",
      severity: "sev1",
      occurredAt: "2024-06-12T10:00:00Z",
      entityHints: ["service:a"],
      dedupKey: "k",
      summary: "s",
      url: "https://x.example.com",
      kind: "trigger",
    };
    for (const path of paths(payload)) {
      for (const value of WEIRD_VALUES) exercise(SHARED_TRIGGER_ORDER[0]!, withValueAt(payload, path, value));
    }
  });

  it("chat bodies with every field of the wrong type", () => {
    const body = { channel_id: "C", message_id: "M", text: "down", author: "a", timestamp: 1, emoji: "x", trigger: "t" };
    for (const path of paths(body)) {
      for (const value of WEIRD_VALUES) exercise(chatSource, withValueAt(body, path, value));
    }
  });

  it("huge arrays and strings stay bounded and fast", () => {
    const started = Date.now();
    const tags = Array.from({ length: 200_000 }, (_, index) => `tag:${index}`);
    const longText = "x".repeat(1_000_000);
    const alerts = Array.from({ length: 20_000 }, (_, index) => ({
      status: "firing",
      labels: { alertname: "A", i: String(index) },
      fingerprint: String(index),
    }));
    const bodies: Array<[TriggerSource, unknown]> = [
      [SHARED_TRIGGER_ORDER[2]!, { alert_type: "error", tags, title: longText, body: longText }],
      [alertRouterSource, { groupKey: longText, alerts }],
      [chatSource, { channel_id: "C", message_id: longText, text: longText }],
      [SHARED_TRIGGER_ORDER[0]!, { serviceSource: "remote", connectionId: "c", title: longText, severity: "sev1", entityHints: tags }],
    ];
    for (const [source, body] of bodies) {
      exercise(source, body);
      const alert = source.map(body, context).alert!;
      expect(Buffer.byteLength(alert.attachIdentity ?? "")).toBeLessThanOrEqual(512);
      expect(Buffer.byteLength(alert.summary ?? "")).toBeLessThanOrEqual(8192);
      expect(JSON.stringify(alert.data).length).toBeLessThan(300_000);
    }
    // A hang detector, not a budget: this takes a fraction of a second; a mapping that went
    // quadratic on these sizes would take minutes.
    expect(Date.now() - started).toBeLessThan(20_000);
  });

  it("titles built to make a pattern backtrack are handled in linear time", () => {
    const started = Date.now();
    const title = `[Triggered${" ".repeat(200_000)}`;
    exercise(SHARED_TRIGGER_ORDER[2]!, { alert_type: "error", title });
    exercise(chatSource, { channel_id: "C", message_id: "M", text: `${"p".repeat(200_000)}1` });
    // A hang detector: linear, this is milliseconds; a backtracking pattern on 200,000
    // characters takes minutes.
    expect(Date.now() - started).toBeLessThan(20_000);
  });

  it("nothing pollutes Object.prototype", () => {
    for (const file of FIXTURES) {
      const body = JSON.parse(JSON.stringify(fixture(file)).replace("{", '{"__proto__":{"polluted":true},'));
      for (const source of ALL_SOURCES) exercise(source, body);
    }
    exercise(chatSource, new URLSearchParams("__proto__[polluted]=1&channel_id=C&message_id=M"));
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});
