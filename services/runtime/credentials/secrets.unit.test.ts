import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { sha256, sha256Hex } from "./secrets.js";

describe("credential hashes", () => {
  it("are SHA-256 of the UTF-8 text, as stored by earlier releases", () => {
    // FIPS 180-2's example: the hashes stored in the database must not change with the code.
    expect(sha256Hex("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    for (const text of ["", "wr_ingest_0123456789abcdef", "é ü 日本 🚨"]) {
      const expected = createHash("sha256").update(text, "utf8").digest();
      expect(sha256(text).equals(expected)).toBe(true);
      expect(sha256Hex(text)).toBe(expected.toString("hex"));
    }
  });
});
