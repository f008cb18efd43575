import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { MAX_DESCRIPTION_CHARACTERS } from "./custom-source-records.js";

// A custom source's description: kept as given (an importer keeps the original templates there),
// left as it is by an edit that does not name it, bounded.

let app: TestApp;
let owner: string;

beforeAll(async () => {
  app = await startApp();
  owner = await app.ownerToken();
});

afterAll(async () => {
  await app?.stop();
});

describe("a custom source's description", () => {
  it("is kept on creation, survives an edit of the rules, changes when given, and is bounded", async () => {
    const text = 'Imported from Grafana OnCall.\n--- web.title ---\n{{ payload.title | default("x") }}';
    const made = await app.call("POST", "/o/acme/custom-sources", { token: owner, body: { name: "described", rules: [{ title: "'t'" }], description: text } });
    expect(made.status).toBe(201);
    expect(made.body.source.description).toBe(text);
    const id = made.body.source.id as string;
    expect((await app.call("GET", `/o/acme/custom-sources/${id}`, { token: owner })).body.description).toBe(text);

    const rules = await app.call("PATCH", `/o/acme/custom-sources/${id}`, { token: owner, body: { rules: [{ title: "'new'" }] } });
    expect(rules.status).toBe(200);
    expect(rules.body.description).toBe(text);
    const changed = await app.call("PATCH", `/o/acme/custom-sources/${id}`, { token: owner, body: { description: "checkout's health checker" } });
    expect(changed.status).toBe(200);
    expect(changed.body).toMatchObject({ description: "checkout's health checker", rules: [{ title: "'new'" }] });
    const cleared = await app.call("PATCH", `/o/acme/custom-sources/${id}`, { token: owner, body: { description: "" } });
    expect(cleared.body.description ?? "").toBe("");

    const long = await app.call("PATCH", `/o/acme/custom-sources/${id}`, { token: owner, body: { description: "x".repeat(MAX_DESCRIPTION_CHARACTERS + 1) } });
    expect(long.status).toBe(400);
    expect(long.body.error).toContain(`description: at most ${MAX_DESCRIPTION_CHARACTERS} characters`);
    const longNew = await app.call("POST", "/o/acme/custom-sources", {
      token: owner,
      body: { name: "too-long", rules: [{ title: "'t'" }], description: "x".repeat(MAX_DESCRIPTION_CHARACTERS + 1) },
    });
    expect(longNew.status).toBe(400);
    expect((await app.call("GET", "/o/acme/custom-sources", { token: owner })).body.customSources.map((s: { name: string }) => s.name)).toEqual(["described"]);
  });
});
