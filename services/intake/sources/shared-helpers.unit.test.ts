import { describe, expect, it } from "vitest";
import { asHttpUrl, jsonSnapshot } from "./foreign-json.js";
import { toAlertDelivery, type NormalizedAlert } from "./normalized-alert.js";
import { cutCharacters, cutUtf8, encodePathSegment, storableText } from "./text-limits.js";
import { parseDateTime, parseRfc3339, timestampFromEpochSeconds } from "./timestamps.js";

const iso = (timestamp: { seconds: bigint; nanos: number } | undefined) =>
  timestamp === undefined ? undefined : `${new Date(Number(timestamp.seconds) * 1000).toISOString().slice(0, 19)}.${String(timestamp.nanos).padStart(9, "0")}Z`;

describe("date-time parsing", () => {
  it.each<[string, string | undefined]>([
    ["2024-06-12T10:05:44Z", "2024-06-12T10:05:44.000000000Z"],
    ["2024-06-12T10:05:44.312+0000", "2024-06-12T10:05:44.312000000Z"],
    ["2024-06-12T10:07:49.4421031Z", "2024-06-12T10:07:49.442103100Z"],
    ["2024-06-12T12:05:44+02:00", "2024-06-12T10:05:44.000000000Z"],
    ["2024-06-12T05:05:44-0500", "2024-06-12T10:05:44.000000000Z"],
    ["2024-06-12 10:05:44", "2024-06-12T10:05:44.000000000Z"],
    ["2024-06-12T10:05:44.1234567891234Z", "2024-06-12T10:05:44.123456789Z"],
    ["2024-06-30T23:59:60Z", "2024-06-30T23:59:59.000000000Z"],
    ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000000000Z"],
    ["0050-03-01T00:00:00Z", "0050-03-01T00:00:00.000000000Z"],
    ["2024-02-30T10:00:00Z", undefined],
    ["2023-02-29T10:00:00Z", undefined],
    ["2024-13-01T10:00:00Z", undefined],
    ["2024-06-12T24:00:00Z", undefined],
    ["2024-06-12T10:00:00+25:00", undefined],
    ["0000-12-31T23:00:00+02:00", undefined],
    ["0000-12-31T23:00:00-02:00", "0001-01-01T01:00:00.000000000Z"],
    ["12/06/2024", undefined],
    ["3/22/2019 1:36:33 PM", undefined],
    ["", undefined],
  ])("%j → %s", (text, expected) => {
    expect(iso(parseDateTime(text))).toBe(expected);
  });

  it("non-strings and absurd lengths are absent", () => {
    expect(parseDateTime(1718186744)).toBeUndefined();
    expect(parseDateTime(`2024-06-12T10:05:44.${"1".repeat(100)}Z`)).toBeUndefined();
  });

  it.each<[string, boolean]>([
    ["2024-06-12T10:05:44Z", true],
    ["2024-06-12t10:05:44.5z", true],
    ["2024-06-12T10:05:44+02:00", true],
    ["2024-06-12T10:05:44+0200", false],
    ["2024-06-12 10:05:44Z", false],
    ["2024-06-12T10:05:44", false],
    ["2024-06-12", false],
  ])("RFC 3339 strictly: %j → %s", (text, valid) => {
    expect(parseRfc3339(text) !== undefined).toBe(valid);
  });

  it.each<[number, string | undefined]>([
    [1718186712.348, "2024-06-12T10:05:12.348000000Z"],
    [1718186712, "2024-06-12T10:05:12.000000000Z"],
    // biome-ignore lint/correctness/noPrecisionLoss: a fraction past what a double holds is the case under test.
    [1718186712.9999999, "2024-06-12T10:05:13.000000000Z"],
    [0, "1970-01-01T00:00:00.000000000Z"],
    [1e20, undefined],
    [Number.NaN, undefined],
  ])("epoch seconds %d → %s", (seconds, expected) => {
    expect(iso(timestampFromEpochSeconds(seconds))).toBe(expected);
  });
});

describe("text limits", () => {
  it("cuts UTF-8 on a character boundary", () => {
    expect(cutUtf8("aé€😀", 1)).toBe("a");
    expect(cutUtf8("aé€😀", 2)).toBe("a");
    expect(cutUtf8("aé€😀", 3)).toBe("aé");
    expect(cutUtf8("aé€😀", 6)).toBe("aé€");
    expect(cutUtf8("aé€😀", 9)).toBe("aé€");
    expect(cutUtf8("aé€😀", 10)).toBe("aé€😀");
  });

  it("counts characters as code points", () => {
    expect(cutCharacters("😀😀😀", 2)).toBe("😀😀");
    expect(cutCharacters("abc", 5)).toBe("abc");
  });

  it("makes text storable and encodable", () => {
    expect(storableText("a\u0000b")).toBe("a\uFFFDb");
    expect(storableText("x\uD800y")).toBe("x\uFFFDy");
    expect(storableText("😀")).toBe("😀");
    expect(storableText("\uDC00 and \u0000")).toBe("\uFFFD and \uFFFD");
    expect(storableText("CPU high on db-1 日本")).toBe("CPU high on db-1 日本");
    expect(encodePathSegment("a/\uDC00")).toBe("a%2F%EF%BF%BD");
  });
});

describe("foreign JSON", () => {
  it.each<[unknown, string | undefined]>([
    ["https://example.com/a", "https://example.com/a"],
    ["http://example.com", "http://example.com"],
    [" https://example.com ", "https://example.com"],
    ["javascript:alert(1)", undefined],
    ["data:text/html,hi", undefined],
    ["//example.com", undefined],
    [`https://example.com/${"a".repeat(5000)}`, undefined],
    [42, undefined],
  ])("http(s) URL %j → %j", (value, expected) => {
    expect(asHttpUrl(value)).toBe(expected);
  });

  it("snapshots are bounded and drop __proto__ keys", () => {
    const value = JSON.parse('{"__proto__": {"x": 1}, "a": [1, 2, 3, 4], "b": {"c": {"d": {"e": 1}}}, "s": "abcdef"}');
    expect(jsonSnapshot(value, { maxDepth: 3, maxEntries: 3, maxStringBytes: 3 })).toEqual({
      a: [1, 2, 3],
      b: { c: { d: null } },
      s: "abc",
    });
  });
});

describe("normalized alert limits", () => {
  const base: NormalizedAlert = {
    source: "metrics-monitor",
    attachIdentity: "metrics-monitor:alert:1",
    eventId: "e1",
    kind: "alert",
    title: "t",
    severity: "sev3",
  };

  it("a long attach identity becomes a stable digest in the source's namespace", () => {
    const long = `metrics-monitor:title:${"x".repeat(1000)}|`;
    const a = toAlertDelivery({ ...base, attachIdentity: long }).alert.attachIdentity;
    expect(a).toMatch(/^metrics-monitor:sha256:[0-9a-f]{64}$/);
    expect(toAlertDelivery({ ...base, attachIdentity: long }).alert.attachIdentity).toBe(a);
    expect(toAlertDelivery({ ...base, attachIdentity: `${long}y` }).alert.attachIdentity).not.toBe(a);
  });

  it("short identities are kept as they are, and an empty one stays empty", () => {
    expect(toAlertDelivery(base).alert.attachIdentity).toBe("metrics-monitor:alert:1");
    expect(toAlertDelivery({ ...base, attachIdentity: "" }).alert.attachIdentity).toBe("");
  });

  it("titles, summaries and data strings are capped, NUL is replaced", () => {
    const alert = toAlertDelivery({
      ...base,
      title: "t".repeat(5000),
      summary: "s".repeat(20_000),
      data: { text: "\u0000".repeat(3) + "d".repeat(20_000), nested: { list: ["a\u0000"] } },
    }).alert;
    expect(alert.title).toHaveLength(1024);
    expect(alert.summary).toHaveLength(8192);
    expect((alert.data?.text as string | undefined)?.length).toBeLessThanOrEqual(8192);
    expect(JSON.stringify(alert.data)).not.toContain("\\u0000");
  });

  it("an overlong link is dropped rather than cut", () => {
    expect(toAlertDelivery({ ...base, link: `chat://c/${"m".repeat(5000)}` }).alert.link).toBeUndefined();
  });
});
