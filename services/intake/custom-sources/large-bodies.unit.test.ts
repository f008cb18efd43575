import { afterAll, describe, expect, it } from "vitest";
import { createLargeBodies, exceedsBytes, LARGE_BODY_BYTES } from "./large-bodies.js";

describe("large bodies on a worker thread", () => {
  const largeBodies = createLargeBodies({ workers: 1 });
  afterAll(() => largeBodies.close());

  it("loads its worker's module under the test runner and maps a body there", async () => {
    const bytes = Buffer.from(JSON.stringify({ title: "Disk full", padding: Array.from({ length: 4 }, () => "x ".repeat(10_000)) }));
    expect(bytes.byteLength).toBeGreaterThan(LARGE_BODY_BYTES);
    const answer = await largeBodies.deliver("org", {
      bytes,
      contentType: "application/json",
      source: { id: "source", version: 1, rules: [{ name: "main", title: "body.title" }] as never },
      headers: {},
      query: {},
      receivedAtMs: Date.now(),
      wantsBodyDigest: false,
    });
    expect(answer).toMatchObject({ result: { matchedRule: "main", fields: { title: "Disk full" } }, kept: { truncated: true } });
  });

  it("evaluates saved rules, given rules and an attach key over a parsed body there", async () => {
    const body = { title: "Disk full", host: "db-1" };
    const common = { body, headers: {}, query: {}, receivedAtMs: Date.now() };
    const saved = await largeBodies.evaluate("org", {
      ...common,
      rules: { source: { id: "s", version: 1, rules: [{ name: "main", title: "body.title" }] as never } },
    });
    expect(saved).toMatchObject({ matchedRule: "main", fields: { title: "Disk full" } });
    const given = await largeBodies.evaluate("org", { ...common, rules: { given: [{ name: "other", title: "body.host" }] as never } });
    expect(given).toMatchObject({ matchedRule: "other", fields: { title: "db-1" } });
    const key = await largeBodies.evaluate("org", { ...common, rules: { attachKey: "body.host + '/x'" } });
    expect(key.fields?.attachKey).toBe("db-1/x");
    const broken = await largeBodies.evaluate("org", { ...common, rules: { given: [{ name: "bad", title: "body.(" }] as never } });
    expect(broken.error).toMatch(/^the rules could not be compiled/);
  });
});

describe("exceedsBytes", () => {
  it("measures a parsed value about as its JSON, and stops once over", () => {
    const value = { a: "x".repeat(1_000), list: Array.from({ length: 100 }, (_, i) => ({ i })) };
    const json = Buffer.byteLength(JSON.stringify(value));
    expect(exceedsBytes(value, json * 2)).toBe(false);
    expect(exceedsBytes(value, json / 2)).toBe(true);
    expect(exceedsBytes("x".repeat(LARGE_BODY_BYTES + 1), LARGE_BODY_BYTES)).toBe(true);
    expect(
      exceedsBytes(
        Array.from({ length: 70_000 }, () => 0),
        LARGE_BODY_BYTES,
      ),
    ).toBe(true);
    expect(exceedsBytes(null, 0)).toBe(true);
    expect(exceedsBytes({}, 10)).toBe(false);
  });
});
