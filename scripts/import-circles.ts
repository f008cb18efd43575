// Finds circles between files: every TypeScript file the repository tracks under `services/`,
// `test/` and `scripts/`, the relative modules each imports (type-only imports and re-exports
// included, since a circle of types still ties the files together), and every strongly connected
// group of more than one file, or a file that imports itself. A circle means neither file can be
// read, moved or tested without the other; CI runs this through import-circles.unit.test.ts.
//
//   npm run import-circles
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join, posix } from "node:path";

const ROOT = join(import.meta.dirname, "..");

/** The relative module specifiers a source text imports or re-exports, statically or dynamically. */
export function importedSpecifiers(source: string): string[] {
  const found: string[] = [];
  const patterns = [
    /\b(?:import|export)\s[^;]*?\bfrom\s*["'](\.{1,2}\/[^"']+)["']/g,
    /\bimport\s*["'](\.{1,2}\/[^"']+)["']/g,
    /\bimport\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)/g,
  ];
  for (const pattern of patterns) for (const match of source.matchAll(pattern)) found.push(match[1]!);
  return found;
}

/** The tracked file a specifier names from `from`: `.js` in a specifier is the `.ts` or `.tsx` source. */
function resolveSpecifier(from: string, specifier: string, files: ReadonlySet<string>): string | undefined {
  const target = posix.normalize(posix.join(posix.dirname(from), specifier));
  for (const candidate of [target, target.replace(/\.js$/, ".ts"), target.replace(/\.js$/, ".tsx"), `${target}/index.ts`]) {
    if (files.has(candidate)) return candidate;
  }
  return undefined;
}

/** Each file's imports of other files, keyed by repository-relative path. */
export function importGraph(sources: ReadonlyMap<string, string>): Map<string, string[]> {
  const files = new Set(sources.keys());
  const graph = new Map<string, string[]>();
  for (const [file, text] of sources) {
    const targets = importedSpecifiers(text)
      .map((specifier) => resolveSpecifier(file, specifier, files))
      .filter((target): target is string => target !== undefined);
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** The circles of a graph: its strongly connected groups of two or more files, and files importing themselves (Tarjan). */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const found: string[][] = [];
  let next = 0;
  for (const start of graph.keys()) {
    if (index.has(start)) continue;
    // Iterative depth-first search, so a deep chain of imports cannot overflow the call stack.
    const work: { node: string; edge: number }[] = [{ node: start, edge: 0 }];
    index.set(start, next);
    low.set(start, next++);
    stack.push(start);
    onStack.add(start);
    while (work.length > 0) {
      const frame = work[work.length - 1]!;
      const edges = graph.get(frame.node) ?? [];
      if (frame.edge < edges.length) {
        const target = edges[frame.edge++]!;
        if (!index.has(target)) {
          index.set(target, next);
          low.set(target, next++);
          stack.push(target);
          onStack.add(target);
          work.push({ node: target, edge: 0 });
        } else if (onStack.has(target)) {
          low.set(frame.node, Math.min(low.get(frame.node)!, index.get(target)!));
        }
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(frame.node)!));
      if (low.get(frame.node) !== index.get(frame.node)) continue;
      const group: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        group.push(member);
      } while (member !== frame.node);
      if (group.length > 1 || (graph.get(frame.node) ?? []).includes(frame.node)) found.push(group.sort());
    }
  }
  return found;
}

/** The repository's TypeScript sources under `services/`, `test/` and `scripts/`. */
export function repositorySources(root = ROOT): Map<string, string> {
  const listed = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "services", "test", "scripts"], {
    cwd: root,
    encoding: "utf8",
  });
  const sources = new Map<string, string>();
  for (const file of listed.split("\n")) {
    if (!/\.(ts|tsx)$/.test(file) || !existsSync(join(root, file))) continue;
    sources.set(file, readFileSync(join(root, file), "utf8"));
  }
  return sources;
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  const found = circles(importGraph(repositorySources()));
  for (const group of found) console.error(`circle between ${group.join(", ")}`);
  if (found.length > 0) {
    console.error(`${found.length} circle(s) between files: move what both sides need into a file of its own, or pass it in`);
    process.exit(1);
  }
  console.log("no circles between files");
}
