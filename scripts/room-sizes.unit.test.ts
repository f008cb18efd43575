import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

/** The most source files (tests included) a folder under services/ holds directly: past it, a room of its own. */
const MOST_FILES_IN_A_ROOM = 25;

/** Every folder under `dir` with the source files it holds directly. */
function rooms(dir: string): { folder: string; files: number }[] {
  const entries = readdirSync(dir, { withFileTypes: true });
  const files = entries.filter((e) => e.isFile() && /\.tsx?$/.test(e.name)).length;
  const below = entries.filter((e) => e.isDirectory() && e.name !== "node_modules" && e.name !== "dist").flatMap((e) => rooms(join(dir, e.name)));
  return [{ folder: dir, files }, ...below];
}

describe("rooms", () => {
  it(`no folder under services/ holds more than ${MOST_FILES_IN_A_ROOM} source files directly`, () => {
    const crowded = rooms("services").filter((r) => r.files > MOST_FILES_IN_A_ROOM);
    expect(crowded).toEqual([]);
  });
});
