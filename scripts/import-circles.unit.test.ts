import { describe, expect, it } from "vitest";
import { circles, importedSpecifiers, importGraph, repositorySources } from "./import-circles.js";

describe("importedSpecifiers", () => {
  it("reads static, type-only, side-effect and dynamic imports and re-exports, relative ones only", () => {
    const source = [
      'import { a } from "./a.js";',
      'import type { B } from "../b.js";',
      "import {\n  c,\n  d,\n} from './c.js';",
      'import "./side-effect.js";',
      'export { e } from "./e.js";',
      'export * from "./f.js";',
      'const g = await import("./g.js");',
      'import { z } from "zod";',
      'import { readFileSync } from "node:fs";',
    ].join("\n");
    expect(importedSpecifiers(source).sort()).toEqual(["../b.js", "./a.js", "./c.js", "./e.js", "./f.js", "./g.js", "./side-effect.js"]);
  });
});

describe("circles", () => {
  it("finds a two-file circle, a longer one and a file importing itself, and leaves a chain alone", () => {
    const graph = importGraph(
      new Map([
        ["x/a.ts", 'import { b } from "./b.js";'],
        ["x/b.ts", 'import type { A } from "./a.js";'],
        ["y/p.ts", 'import { q } from "./q.js";'],
        ["y/q.ts", 'import { r } from "../z/r.js";'],
        ["z/r.ts", 'import { p } from "../y/p.js";'],
        ["self.ts", 'export * from "./self.js";'],
        ["chain/one.ts", 'import "./two.js";'],
        ["chain/two.ts", 'import "./three.js";'],
        ["chain/three.ts", ""],
      ]),
    );
    expect(circles(graph).sort((left, right) => left[0]!.localeCompare(right[0]!))).toEqual([
      ["self.ts"],
      ["x/a.ts", "x/b.ts"],
      ["y/p.ts", "y/q.ts", "z/r.ts"],
    ]);
  });

  it("resolves a .js specifier to its .tsx source and a folder to its index", () => {
    const graph = importGraph(
      new Map([
        ["page.tsx", 'import { list } from "./list/index.js";'],
        ["list/index.ts", 'import { Page } from "../page.js";'],
      ]),
    );
    expect(circles(graph)).toEqual([["list/index.ts", "page.tsx"]]);
  });
});

describe("the repository", () => {
  it("has no circles between files", () => {
    expect(circles(importGraph(repositorySources()))).toEqual([]);
  });
});
