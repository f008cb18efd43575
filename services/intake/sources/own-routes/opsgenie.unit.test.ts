import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { mapAction, mapCreate, OpsgenieRequestError } from "./opsgenie.js";

const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const fixture = (name: string): any => JSON.parse(readFileSync(join(repoRoot, "test/fixtures/opsgenie", name), "utf8"));
const context = { receivedAt: new Date("2024-06-12T12:00:00Z") };

describe("Opsgenie Alert API mapping", () => {
  it.each([
    ["create-alert-full.json", "checkout-api-5xx-prod", "sev1", { kind: "service", id: "checkout-api" }],
    ["create-alert-minimal.json", "Disk 95% full on db-02", "sev3", undefined],
    ["alertmanager-0.25-create.json", "833d000dfe51d8b4b43b5b98d90f1a85cc2a2434a0c8f151f81f73142b20dc2c", "sev2", { kind: "service", id: "checkout-api" }],
    ["hostile-create-alert.json", "hostile\uFFFDalias", "sev4", { kind: "service", id: "__proto__" }],
  ])("%s attaches on its alias (%s)", (name, alias, severity, entity) => {
    const { delivery } = mapCreate(fixture(name), context);
    expect(delivery.alert).toMatchObject({ source: "opsgenie", kind: "alert", attachIdentity: `opsgenie:alias:${alias}`, severity });
    expect(delivery.alert.entity).toEqual(entity);
  });

  it("keeps every field of the full create", () => {
    const body = fixture("create-alert-full.json");
    const { delivery } = mapCreate(body, context);
    expect(delivery.alert).toMatchObject({ title: body.message, summary: body.description, alertRef: body.alias });
    expect(delivery.alert.data).toEqual({
      alias: body.alias,
      tags: body.tags,
      details: body.details,
      entity: body.entity,
      source: body.source,
      priority: body.priority,
      note: body.note,
      user: body.user,
      actions: body.actions,
      responders: body.responders,
      visibleTo: body.visibleTo,
    });
  });

  it("cuts the message to 130 characters, and refuses by field", () => {
    expect([...(mapCreate(fixture("hostile-create-alert.json"), context).delivery.alert.title ?? "")]).toHaveLength(130);
    const refused = (body: unknown) => {
      try {
        mapCreate(body, context);
      } catch (err) {
        if (err instanceof OpsgenieRequestError) return err.errors;
      }
      return undefined;
    };
    expect(refused({})).toEqual({ message: "Message can not be empty." });
    expect(refused({ message: "m", priority: "p1" })).toEqual({ priority: "Priority should be one of [P1, P2, P3, P4, P5]." });
    expect(refused({ message: "m", details: [] })).toEqual({ details: "Details should be a map of strings." });
    expect(refused("m")).toEqual({ body: "Request body should be a JSON object." });
  });

  it.each([
    ["close", "close-alert.json", "recovery"],
    ["acknowledge", "acknowledge-alert.json", "acknowledge"],
    ["close", "alertmanager-0.25-close.json", "recovery"],
  ] as const)("%s with %s is a %s entry on the identity it is given", (action, name, kind) => {
    const body = fixture(name);
    const delivery = mapAction(action, "opsgenie:alias:a", body, context);
    expect(delivery.alert).toMatchObject({ source: "opsgenie", kind, attachIdentity: "opsgenie:alias:a", eventId: "" });
    expect(delivery.alert.data).toMatchObject({ action, source: body.source });
  });
});
