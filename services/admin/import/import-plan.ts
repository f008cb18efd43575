import { SOURCE_BADGES } from "../../domain/vocabulary.js";

/**
 * What an import of another tool's export makes here, whichever tool it came from: custom sources
 * (with rules, and what could not be translated) and heartbeats. The vendor readers
 * (`oncall.ts`, `opsgenie.ts`) build it; `apply-import.ts` compares it with the organization and
 * creates or updates what differs.
 */

/** A rule as the custom sources API reads and answers it; empty fields left out. */
export interface RuleJson {
  name: string;
  when?: string;
  kind?: string;
  title?: string;
  severity?: string;
  attachKey?: string;
  eventId?: string;
  summary?: string;
  link?: string;
}

export interface Untranslated {
  /** Where the template was: `web.title`, `resolve_signal`, `slack.message`, ... */
  template: string;
  text: string;
  reason: string;
}

export interface PlannedSource {
  /** The name here: the badge, and what a second run matches on. */
  name: string;
  /** What it came from: `Grafana OnCall integration "Checkout" (CXZ1…)`. */
  from: string;
  rules: RuleJson[];
  /** Where it came from and its original templates, word for word. */
  description: string;
  untranslated: Untranslated[];
  notes: string[];
}

export interface PlannedHeartbeat {
  name: string;
  from: string;
  expectedIntervalSeconds: number;
  graceSeconds: number;
  paused: boolean;
  /** Where the job pinged there, printed beside the new ping URL. */
  oldPingUrl: string;
  notes: string[];
}

export interface ImportPlan {
  tool: string;
  sources: PlannedSource[];
  heartbeats: PlannedHeartbeat[];
  skipped: { item: string; reason: string }[];
}

/** A wrong file: says which field and what was expected. */
export class ExportShapeError extends Error {
  override name = "ExportShapeError";
}

/** A name as a custom source (lowercase letters, digits, `-`) or heartbeat takes it, 63 at most. */
export function slugOf(name: string): string {
  return name
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+/, "")
    .slice(0, 63)
    .replace(/-+$/, "");
}

/**
 * A source name from the vendor's name: its slug, prefixed with the tool's (`oncall-`) when it is
 * the badge of a built-in source or no slug is left; the vendor id when the name is taken.
 */
export function sourceNameOf(tool: string, name: string, id: string, taken: Set<string>): string {
  let slug = slugOf(name);
  if (!slug || (SOURCE_BADGES as readonly string[]).includes(slug) || slug === "custom") slug = slugOf(`${tool}-${name}`);
  if (taken.has(slug) || !slug) slug = slugOf(`${slug.slice(0, 40)}-${id}`);
  return slug;
}

/**
 * One or several JSON documents: a file holding one answer, an array, or several answers one
 * after another (`curl …page=1; curl …page=2`). Throws with the position of what is not JSON.
 */
export function parseDocuments(text: string): unknown[] {
  const trimmed = text.trim();
  if (trimmed === "") throw new ExportShapeError("the file is empty: save the API's answer into it");
  try {
    return [JSON.parse(trimmed)];
  } catch {
    // Several documents one after another: split at the end of each top-level value.
  }
  const docs: unknown[] = [];
  let depth = 0;
  let inString = false;
  let start = -1;
  for (let i = 0; i < trimmed.length; i++) {
    const c = trimmed[i]!;
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === "{" || c === "[") {
      if (depth === 0) start = i;
      depth++;
    } else if (c === "}" || c === "]") {
      depth--;
      if (depth === 0) {
        const piece = trimmed.slice(start, i + 1);
        try {
          docs.push(JSON.parse(piece));
        } catch (err) {
          throw new ExportShapeError(`not JSON at character ${start}: ${err instanceof Error ? err.message : String(err)}`);
        }
      }
      if (depth < 0) throw new ExportShapeError(`not JSON: an unmatched "${c}" at character ${i}`);
    } else if (depth === 0 && !/\s|,/.test(c)) {
      throw new ExportShapeError(`not JSON: "${c}" at character ${i} outside any object`);
    }
  }
  if (depth !== 0 || inString) throw new ExportShapeError("not JSON: the file ends inside an object (was the download cut short?)");
  return docs;
}

/** A zod issue as "field: what was expected". */
export function describeIssue(issue: { path: PropertyKey[]; message: string } | undefined): string {
  if (!issue) return "not the expected shape";
  const path = issue.path
    .map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`))
    .join("")
    .replace(/^\./, "");
  return `${path || "the top level"}: ${issue.message}`;
}
