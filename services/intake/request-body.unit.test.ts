import { describe, expect, it } from "vitest";
import { unprocessableOf } from "../runtime/errors.js";
import { MAX_JSON_DEPTH, nestedDeeperThan, parseTriggerBody } from "./request-body.js";

/** An object nested `levels` deep, the body itself the first: {"a":{"a":...}}. */
const nested = (levels: number, inner: unknown = 1): unknown => {
  let value = inner;
  for (let i = 0; i < levels; i++) value = i % 2 ? [value] : { a: value };
  return value;
};
const bytes = (text: string) => new TextEncoder().encode(text);
/** Why parsing `text` was refused: the detail a 422 carries. */
function refusal(text: string): string | undefined {
  try {
    parseTriggerBody(bytes(text), "application/json", { allowForm: false });
  } catch (err) {
    return unprocessableOf(err)?.details;
  }
  return undefined;
}

describe("a trigger body's nesting", () => {
  it("counts objects and arrays, the body itself the first, scalars not at all", () => {
    expect(nestedDeeperThan(1, 0)).toBe(false);
    expect(nestedDeeperThan({}, 0)).toBe(true);
    expect(nestedDeeperThan({ a: "x", b: [1, 2] }, 2)).toBe(false);
    expect(nestedDeeperThan({ a: "x", b: [1, 2] }, 1)).toBe(true);
    expect(nestedDeeperThan(nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH)).toBe(false);
    expect(nestedDeeperThan(nested(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)).toBe(true);
  });

  it("walks a wide body and a body nested far past the limit without exhausting the stack", () => {
    const wide = { alerts: Array.from({ length: 100_000 }, (_, i) => ({ labels: { n: i } })) };
    expect(nestedDeeperThan(wide, 4)).toBe(false);
    expect(nestedDeeperThan(wide, 3)).toBe(true);
    expect(nestedDeeperThan(nested(200_000), MAX_JSON_DEPTH)).toBe(true);
    const text = `${"[".repeat(5_000)}${"]".repeat(5_000)}`;
    expect(refusal(text)).toBe("the body is nested deeper than 64 levels");
  });

  it("reads a body at the limit and refuses one past it", () => {
    expect(parseTriggerBody(bytes(JSON.stringify(nested(MAX_JSON_DEPTH))), "application/json", { allowForm: false })).toEqual(nested(MAX_JSON_DEPTH));
    expect(refusal(JSON.stringify(nested(MAX_JSON_DEPTH + 1)))).toBe("the body is nested deeper than 64 levels");
  });

  it("refuses a body that is not UTF-8 after any earlier one, the decoders being shared", () => {
    expect(() => parseTriggerBody(new Uint8Array([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]), "application/json", { allowForm: false })).toThrow(
      /not valid UTF-8/,
    );
    expect(parseTriggerBody(bytes('{"a":"é"}'), "application/json", { allowForm: false })).toEqual({ a: "é" });
  });
});
