import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { LogEntrySchema, RawSeriesSchema } from "../../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { entriesProblem, isIsoTime, seriesProblem, sortByTime, toIsoTime } from "./shaped-data.js";
import { formatWindowValue, parseWindowValue } from "./window-format.js";

const series = (points: Array<{ t: string; v: number }>) => [create(RawSeriesSchema, { label: "s", points })];
const entries = (times: string[]) => times.map((t) => create(LogEntrySchema, { t, line: "l" }));

describe("rule 7: series and entries", () => {
  it.each([
    ["2024-05-01T12:00:00Z", true],
    ["2024-05-01T12:00:00.123456789Z", true],
    ["2024-05-01T14:00:00+02:00", true],
    ["2024-05-01T12:00Z", true],
    ["2024-05-01", false],
    ["2024-05-01 12:00:00Z", false],
    ["1714564800", false],
    ["2024-13-01T12:00:00Z", false],
  ])("%s is ISO 8601 with a zone: %s", (value, ok) => {
    expect(isIsoTime(value)).toBe(ok);
  });

  it("accepts sorted points with finite values, and says what is wrong otherwise", () => {
    expect(
      seriesProblem(
        series([
          { t: "2024-05-01T12:00:00Z", v: 1 },
          { t: "2024-05-01T12:01:00Z", v: -2.5 },
        ]),
      ),
    ).toBeUndefined();
    expect(
      seriesProblem(
        series([
          { t: "2024-05-01T12:01:00Z", v: 1 },
          { t: "2024-05-01T12:00:00Z", v: 2 },
        ]),
      ),
    ).toBe('series "s": points are not sorted ascending by time (point 1 is earlier than point 0)');
    expect(seriesProblem(series([{ t: "2024-05-01T12:00:00Z", v: Number.NaN }]))).toBe(
      'series "s": point 0 has value NaN or not a JSON number, not a finite number',
    );
    expect(seriesProblem(series([{ t: "yesterday", v: 1 }]))).toBe('series "s": point 0 has time "yesterday", not ISO 8601');
  });

  it("orders log entries below the millisecond and allows equal times", () => {
    expect(entriesProblem(entries(["2024-05-01T12:00:00.000100Z", "2024-05-01T12:00:00.000200Z", "2024-05-01T12:00:00.000200Z"]))).toBeUndefined();
    expect(entriesProblem(entries(["2024-05-01T12:00:00.000200Z", "2024-05-01T12:00:00.000100Z"]))).toBe(
      "entries are not sorted ascending by time (entry 1 is earlier than entry 0)",
    );
    // Zones count: 14:00+02:00 is 12:00Z.
    expect(entriesProblem(entries(["2024-05-01T14:00:00+02:00", "2024-05-01T12:00:01Z"]))).toBeUndefined();
  });

  it("normalizes what a source holds: epoch milliseconds, Dates and ISO text", () => {
    expect(toIsoTime(0)).toBe("1970-01-01T00:00:00.000Z");
    expect(toIsoTime(new Date("2024-05-01T12:00:00Z"))).toBe("2024-05-01T12:00:00.000Z");
    expect(toIsoTime("2024-05-01T12:00:00Z")).toBe("2024-05-01T12:00:00Z");
    expect(() => toIsoTime("May 1")).toThrow('time "May 1" is not ISO 8601');
    expect(
      sortByTime([
        { t: "2024-05-01T12:00:02Z", n: 1 },
        { t: "2024-05-01T12:00:01Z", n: 2 },
        { t: "2024-05-01T12:00:01Z", n: 3 },
      ]).map((x) => x.n),
    ).toEqual([2, 3, 1]);
  });
});

describe("window formats", () => {
  const ms = Date.parse("2024-05-01T12:34:56.789Z");

  it.each([
    ["date", "2024-05-01", Date.parse("2024-05-01T00:00:00Z")],
    ["iso", "2024-05-01T12:34:56.789Z", ms],
    ["epoch-s", 1_714_566_896, 1_714_566_896_000],
    ["epoch-ms", ms, ms],
    ["epoch-ns", "1714566896789000000", ms],
    ["grafana", String(ms), ms],
  ] as const)("%s: formats as %s and parses back", (format, value, back) => {
    expect(formatWindowValue(ms, format)).toEqual(value);
    expect(parseWindowValue(value, format)).toBe(back);
  });

  it("reads Grafana's relative times and refuses what does not parse", () => {
    expect(parseWindowValue("now-1h", "grafana", 10_000_000)).toBe(10_000_000 - 3_600_000);
    expect(parseWindowValue("now", "grafana", 5)).toBe(5);
    expect(() => parseWindowValue("tomorrow", "iso")).toThrow('"tomorrow" is not a iso time');
    expect(() => parseWindowValue(undefined, "epoch-s")).toThrow();
    expect(() => formatWindowValue(ms, "fortnights")).toThrow('unknown window format "fortnights"');
  });
});
