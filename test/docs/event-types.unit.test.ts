import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EVENT_TYPES } from "../../services/subscriptions/event-types.js";

const root = join(import.meta.dirname, "../..");
const read = (path: string) => readFileSync(join(root, path), "utf8");

/** Event types named in code spans (`incident.opened`) in a piece of markdown. */
function namedTypes(markdown: string): Set<string> {
  return new Set([...markdown.matchAll(/`((?:incident|heartbeat|comms)\.[a-z_]+)`/g)].map((m) => m[1]!));
}

describe("the documented event types are the ones a subscription may name", () => {
  it("the how-to page lists every type, and no other", () => {
    const page = read("docs/how-to/subscriptions.md");
    const line = page.slice(page.indexOf("**Event types**"), page.indexOf("The body is", page.indexOf("**Event types**")));
    expect([...namedTypes(line)].sort()).toEqual([...EVENT_TYPES].sort());
  });

  it("the service's README documents each type's payload", () => {
    const readme = read("services/subscriptions/README.md");
    const section = readme.slice(readme.indexOf("## Event types and payloads"));
    for (const type of EVENT_TYPES) expect(namedTypes(section), type).toContain(type);
  });
});
