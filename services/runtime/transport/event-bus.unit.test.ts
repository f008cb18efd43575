import { describe, expect, it } from "vitest";
import { subjectMatcher } from "./event-bus.js";

describe("subjectMatcher", () => {
  const cases: [pattern: string, subject: string, matches: boolean][] = [
    ["events.incidents.opened", "events.incidents.opened", true],
    ["events.incidents.opened", "events.incidents.opened.x", false],
    ["events.incidents.opened", "events.incidents", false],
    ["events.*.opened", "events.incidents.opened", true],
    ["events.*.opened", "events.incidents.resolved", false],
    ["events.*.opened", "events.opened", false],
    ["events.*", "events.incidents", true],
    ["events.*", "events.incidents.opened", false],
    ["events.>", "events.incidents.opened", true],
    ["events.>", "events.incidents", true],
    ["events.>", "events", false],
    ["events.>", "eventsx.incidents", false],
    ["events.*.>", "events.incidents.opened", true],
    ["events.*.>", "events.incidents", false],
    [">", "events", true],
  ];
  it.each(cases)("%s against %s: %s", (pattern, subject, matches) => {
    expect(subjectMatcher(pattern)(subject)).toBe(matches);
  });
});
