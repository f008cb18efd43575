import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { digestOf, digestOfBytes } from "./normalized-alert.js";

describe("digestOfBytes", () => {
  it("is the digest of the bytes' base64 as one part, for every length around a slice's edge", () => {
    for (const length of [0, 1, 2, 3, 49_151, 49_152, 49_153, 98_305, 1_048_576]) {
      const bytes = randomBytes(length);
      expect(digestOfBytes(bytes), `${length} bytes`).toBe(digestOf([bytes.toString("base64")]));
    }
  });

  it("reads only the view it is given, not the rest of its buffer", () => {
    const whole = randomBytes(100_000);
    const view = new Uint8Array(whole.buffer, whole.byteOffset + 7, 60_000);
    expect(digestOfBytes(view)).toBe(digestOf([Buffer.from(view).toString("base64")]));
  });
});
