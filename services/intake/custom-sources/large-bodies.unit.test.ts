import { afterAll, describe, expect, it } from "vitest";
import { createLargeBodies, LARGE_BODY_BYTES } from "./large-bodies.js";

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
});
