// Checks the links of every markdown file in the repository (`git ls-files`, new files not yet
// committed included): a relative link must name a file or folder that exists, and its anchor a
// heading (GitHub's slugs) or an `id`/`name` of that page; an anchor alone, a heading of the same
// page. External http(s) links are not fetched (CI has no network for them), only checked to be
// well-formed. Links inside code (fenced blocks, `inline code`) are not links.
//
//   npm run check-links
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize } from "node:path";

const ROOT = join(import.meta.dirname, "..");

/**
 * GitHub's anchor for a heading's text: lowercase, every character but letters, marks, digits,
 * `_`, `-` and spaces dropped, spaces made hyphens (github-slugger's rule).
 */
export function slug(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** A heading's text as GitHub renders it: links to their text, code and emphasis marks removed. */
function headingText(markdown: string): string {
  return markdown
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/`/g, "")
    .replace(/(\*\*|__|\*|~~)/g, "")
    .replace(/\s+#+\s*$/, "")
    .trim();
}

/** The page's lines with code blanked out: fenced blocks emptied, inline code spans replaced by spaces. */
function proseLines(markdown: string): string[] {
  const lines = markdown.split("\n");
  let fence: string | null = null;
  return lines.map((line) => {
    const open = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence !== null) {
      if (open && open[1]![0] === fence[0] && open[1]!.length >= fence.length && line.trim() === open[1]) fence = null;
      return "";
    }
    if (open) {
      fence = open[1]!;
      return "";
    }
    return line.replace(/(`+)[^`]*?\1/g, (code) => " ".repeat(code.length));
  });
}

/** Every anchor a page offers: its headings' slugs (repeats numbered as GitHub does) and HTML ids. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const lines = markdown.split("\n");
  let fence: string | null = null;
  for (const line of lines) {
    const open = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence !== null) {
      if (open && open[1]![0] === fence[0] && open[1]!.length >= fence.length && line.trim() === open[1]) fence = null;
      continue;
    }
    if (open) {
      fence = open[1]!;
      continue;
    }
    for (const html of line.matchAll(/<[a-z]+\s[^>]*\b(?:id|name)="([^"]+)"/gi)) anchors.add(html[1]!);
    const heading = /^ {0,3}#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const base = slug(headingText(heading[1]!));
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

export interface Link {
  line: number;
  target: string;
}

/** The page's link targets outside code: inline links and images, and reference definitions. */
export function linksOf(markdown: string): Link[] {
  const links: Link[] = [];
  proseLines(markdown).forEach((text, index) => {
    for (const inline of text.matchAll(/\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ line: index + 1, target: inline[1]!.replace(/^<(.*)>$/, "$1") });
    }
    const definition = /^ {0,3}\[[^\]]+\]:\s*(\S+)/.exec(text);
    if (definition) links.push({ line: index + 1, target: definition[1]!.replace(/^<(.*)>$/, "$1") });
    for (const auto of text.matchAll(/<(https?:\/\/[^>\s]*)>/g)) links.push({ line: index + 1, target: auto[1]! });
  });
  return links;
}

/** Why an external link is malformed, or null when it is well-formed. */
export function externalLinkProblem(target: string): string | null {
  if (/^mailto:/i.test(target)) return /^mailto:[^@\s]+@[^@\s]+\.[^@\s]+$/i.test(target) ? null : "a malformed mailto: address";
  if (!/^https?:\/\//i.test(target)) return "a scheme other than http, https or mailto";
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return "not a valid URL";
  }
  if (!url.hostname.includes(".") && url.hostname !== "localhost") return `host "${url.hostname}" is not a domain name`;
  return null;
}

export interface Problem {
  file: string;
  line: number;
  message: string;
}

/** The problems of the given markdown files (paths from `root`). */
export function checkLinks(root: string, files: readonly string[]): Problem[] {
  const anchorCache = new Map<string, Set<string>>();
  const anchorsIn = (file: string): Set<string> => {
    let anchors = anchorCache.get(file);
    if (!anchors) {
      anchors = anchorsOf(readFileSync(join(root, file), "utf8"));
      anchorCache.set(file, anchors);
    }
    return anchors;
  };
  const problems: Problem[] = [];
  for (const file of files) {
    for (const { line, target } of linksOf(readFileSync(join(root, file), "utf8"))) {
      const problem = (message: string) => problems.push({ file, line, message: `${target}: ${message}` });
      if (target === "") {
        problem("an empty link");
        continue;
      }
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
        const external = externalLinkProblem(target);
        if (external) problem(external);
        continue;
      }
      const hash = target.indexOf("#");
      const path = decodeURI(hash < 0 ? target : target.slice(0, hash));
      const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
      const resolved = path === "" ? file : normalize(path.startsWith("/") ? path.slice(1) : join(dirname(file), path));
      if (resolved.startsWith("..")) {
        problem("points outside the repository");
        continue;
      }
      if (!existsSync(join(root, resolved))) {
        problem(`no such file or folder (${resolved})`);
        continue;
      }
      if (anchor === null) continue;
      if (!resolved.endsWith(".md") || statSync(join(root, resolved)).isDirectory()) {
        if (!/^L\d+(-L\d+)?$/.test(anchor)) problem(`an anchor on ${resolved}, which has no headings`);
        continue;
      }
      if (!anchorsIn(resolved).has(anchor)) problem(`no heading in ${resolved} has the anchor #${anchor}`);
    }
  }
  return problems;
}

/** The repository's markdown files: tracked, and new ones git does not ignore. */
function markdownFiles(root: string): string[] {
  const out = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md"], { cwd: root, encoding: "utf8" });
  return [...new Set(out.split("\0").filter((file) => file !== "" && existsSync(join(root, file))))].sort();
}

function main(): void {
  const files = markdownFiles(ROOT);
  const problems = checkLinks(ROOT, files);
  for (const { file, line, message } of problems) console.error(`${file}:${line}: ${message}`);
  if (problems.length > 0) {
    console.error(
      `${problems.length} broken link${problems.length === 1 ? "" : "s"} in ${files.length} markdown files: fix each, then run npm run check-links`,
    );
    process.exit(1);
  }
  console.log(`links checked in ${files.length} markdown files`);
}

if (import.meta.filename === process.argv[1]) main();
