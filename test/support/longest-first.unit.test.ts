import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LONGEST } from "./longest-first.js";

describe("the longest files the sequencer starts first", () => {
  it("names files that exist, in projects that exist", () => {
    for (const key of Object.keys(LONGEST)) {
      const [project, file] = key.split(":");
      expect(["server", "embedded", "soak", "unit"], key).toContain(project);
      expect(existsSync(join(import.meta.dirname, "../..", file!)), key).toBe(true);
    }
  });
});
