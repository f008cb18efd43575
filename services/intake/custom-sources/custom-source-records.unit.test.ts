import { describe, expect, it } from "vitest";
import { parseCustomBody } from "./custom-source-delivery.js";
import { boundedBody, KEPT_BODY_BYTES } from "./custom-source-records.js";

// A body small enough when it arrived is kept without writing it out to measure it: the bodies
// that grow most when written back as JSON, as large as that shortcut takes, still fit.
describe("a kept body's size", () => {
  const largestUnmeasured = Math.floor(KEPT_BODY_BYTES / 6) - 1;
  const fill = (unit: string, open = "", close = "", separator = "") => {
    const parts: string[] = [];
    let length = open.length + close.length;
    while (length + unit.length + separator.length <= largestUnmeasured) {
      parts.push(unit);
      length += unit.length + separator.length;
    }
    return `${open}${parts.join(separator)}${close}`;
  };
  const worst: [string, string, string][] = [
    ["numbers printed in full", fill("1e20", "[", "]", ","), "application/json"],
    ["control characters in a text body", fill("\u0001"), "text/plain"],
    ["quotes in a text body", fill('"'), "text/plain"],
    ["bytes that are not UTF-8", "", "text/plain"],
    ["form fields without values", fill("a", "", "", "&"), "application/x-www-form-urlencoded"],
    ["escaped form keys", fill("%01", "", "", "&"), "application/x-www-form-urlencoded"],
  ];

  it.each(worst)("%s fit when kept unmeasured", (_, text, contentType) => {
    const bytes = text === "" ? new Uint8Array(largestUnmeasured).fill(0xff) : Buffer.from(text, "utf8");
    expect(bytes.byteLength).toBeLessThanOrEqual(largestUnmeasured);
    const body = parseCustomBody(bytes, contentType);
    const kept = boundedBody(body, bytes.byteLength);
    expect(kept.truncated).toBe(false);
    expect(Buffer.byteLength(JSON.stringify(kept.body), "utf8")).toBeLessThanOrEqual(KEPT_BODY_BYTES);
  });

  it("measures a larger body, and cuts one that does not fit", () => {
    const body = { text: "x".repeat(KEPT_BODY_BYTES) };
    const kept = boundedBody(body, KEPT_BODY_BYTES + 20);
    expect(kept.truncated).toBe(true);
    expect(Buffer.byteLength(kept.body as string, "utf8")).toBeLessThanOrEqual(KEPT_BODY_BYTES);
    expect(boundedBody({ text: "small" }, KEPT_BODY_BYTES)).toEqual({ body: { text: "small" }, truncated: false });
  });
});
