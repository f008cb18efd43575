import { expect, it } from "vitest";
import { callApi } from "../support/app.js";
import { duringMaintenance, fixture, getIncident, listIncidents, unique, UUID, type Answer } from "./triggers-kit.js";
import type { DropinContext } from "./dropin-pagerduty.js";

/** Opsgenie Alert API v2 (`/v2/alerts`, close, acknowledge, request status) over HTTP. */

const ACCEPTED = { result: "Request will be processed", took: expect.any(Number), requestId: expect.stringMatching(UUID) };
const UNPROCESSABLE = "Request body is not processable. Please check the errors.";

export function opsgenieSuite(ctx: DropinContext): void {
  const call = (method: string, path: string, body?: unknown, options: { key?: string | null; raw?: string; authorization?: string } = {}): Promise<Answer> => {
    const key = options.key === undefined ? ctx.creds.ingestToken : options.key;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (options.authorization) headers.authorization = options.authorization;
    else if (key !== null) headers.authorization = `GenieKey ${key}`;
    return callApi(ctx.app.url, method, path, { headers, raw: options.raw ?? (body === undefined ? undefined : JSON.stringify(body)) });
  };
  const create = (body: unknown, options?: Parameters<typeof call>[3]) => call("POST", "/v2/alerts", body, options);
  const status = async (requestId: string, key?: string) => call("GET", `/v2/alerts/requests/${requestId}`, undefined, { key });
  const byTitle = async (title: string) => (await listIncidents(ctx.app, ctx.creds.owner)).filter((incident) => incident.title === title);

  it("create opens an incident: 202 in Opsgenie's shape; the request status is read from storage; every field lands", async () => {
    const alias = unique("og");
    const body = { ...fixture("opsgenie/create-alert-full.json"), alias };
    const res = await create(body);
    expect(res.status).toBe(202);
    expect(res.body).toEqual(ACCEPTED);
    const read = await status(res.body.requestId);
    expect(read.status).toBe(200);
    expect(read.body).toEqual({
      data: {
        success: true,
        action: "Create",
        processedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
        integrationId: expect.stringMatching(UUID),
        isSuccess: true,
        status: "Created alert",
        alertId: expect.stringMatching(UUID),
        alias,
        outcome: "opened",
      },
      took: expect.any(Number),
      requestId: res.body.requestId,
    });
    const incident = await getIncident(ctx.app, ctx.creds.owner, read.body.data.alertId);
    expect(incident).toMatchObject({
      title: body.message,
      severity: "sev1",
      state: "open",
      source: "opsgenie",
      entity: { kind: "service", id: "checkout-api" },
    });
    expect(incident.timeline[0]).toMatchObject({ kind: "opened", summary: body.description, alertRef: alias });
    expect(incident.timeline[0].data).toMatchObject({
      alias,
      tags: body.tags,
      details: body.details,
      entity: "checkout-api",
      source: "Prometheus",
      priority: "P1",
      note: "Opened by the 5xx-ratio rule",
      user: "monitoring@example.com",
      actions: ["Restart", "Roll back"],
      responders: body.responders,
      visibleTo: body.visibleTo,
    });

    // The alias attaches; acknowledge and close record entries; the incident stays open.
    const again = await create(body);
    expect((await status(again.body.requestId)).body.data).toMatchObject({ isSuccess: true, alertId: incident.id, outcome: "attached" });
    const ack = await call("POST", `/v2/alerts/${alias}/acknowledge?identifierType=alias`, fixture("opsgenie/acknowledge-alert.json"));
    expect(ack.status).toBe(202);
    expect(ack.body).toEqual(ACCEPTED);
    expect((await status(ack.body.requestId)).body.data).toMatchObject({
      action: "Acknowledge",
      isSuccess: true,
      status: "Acknowledged alert",
      alertId: incident.id,
      alias,
    });
    const close = await call("POST", `/v2/alerts/${alias}/close?identifierType=alias`, fixture("opsgenie/close-alert.json"));
    expect(close.status).toBe(202);
    expect((await status(close.body.requestId)).body.data).toMatchObject({ action: "Close", isSuccess: true, alertId: incident.id, outcome: "recorded" });
    // By id (the alertId we answered), with no body at all: already closed, nothing recorded.
    const byId = await call("POST", `/v2/alerts/${incident.id}/close?identifierType=id`);
    expect(byId.status).toBe(202);
    expect((await status(byId.body.requestId)).body.data).toMatchObject({ isSuccess: true, status: "Alert is already closed" });
    const after = await getIncident(ctx.app, ctx.creds.owner, incident.id);
    expect(after.state).toBe("open");
    expect(after.timeline.map((entry: any) => entry.kind)).toEqual(["opened", "repeat", "acknowledged", "recovery"]);
    // The sender's acknowledgement acknowledges the incident, by the source's badge, as a responder's would.
    expect(after).toMatchObject({ acknowledgedAt: after.timeline[2].at, acknowledgedBy: after.source });
    expect(after.timeline[2]).toMatchObject({
      summary: "Looking into it",
      data: { action: "acknowledge", user: "sre@example.com", source: "Opsgenie mobile" },
    });
    expect(after.timeline[3]).toMatchObject({ summary: "The 5xx ratio is back under 5%" });
  });

  it("a retried create with the same Idempotency-Key records nothing more", async () => {
    const message = unique("og idempotent");
    const post = () =>
      callApi(ctx.app.url, "POST", "/v2/alerts", {
        headers: { "content-type": "application/json", authorization: `GenieKey ${ctx.creds.ingestToken}`, "idempotency-key": `retry-${message}` },
        raw: JSON.stringify({ message }),
      });
    const [first, second] = [await post(), await post()];
    expect([first.status, second.status]).toEqual([202, 202]);
    expect((await status(second.body.requestId)).body.data).toMatchObject({
      alertId: (await status(first.body.requestId)).body.data.alertId,
      outcome: "opened",
    });
    const rows = await byTitle(message);
    expect(rows).toHaveLength(1);
    expect((await getIncident(ctx.app, ctx.creds.owner, rows[0].id)).timeline.map((e: any) => e.kind)).toEqual(["opened"]);
  });

  it("the same create again records a repeat; a close sent again with no create between records nothing and says the alert is closed", async () => {
    const alias = unique("og-once");
    const body = { message: alias, alias };
    for (let k = 0; k < 2; k++) expect((await create(body)).status).toBe(202);
    const [row] = await byTitle(alias);
    const kinds = async () => (await getIncident(ctx.app, ctx.creds.owner, row.id)).timeline.map((entry: any) => entry.kind);
    expect(await kinds()).toEqual(["opened", "repeat"]);

    const close = () => call("POST", `/v2/alerts/${encodeURIComponent(alias)}/close?identifierType=alias`, {});
    const first = await close();
    expect((await status(first.body.requestId)).body.data).toMatchObject({ isSuccess: true, outcome: "recorded" });
    const again = await close();
    expect(again.status).toBe(202);
    expect((await status(again.body.requestId)).body.data).toMatchObject({ isSuccess: true, status: "Alert is already closed", outcome: "ignored" });
    expect(await kinds()).toEqual(["opened", "repeat", "recovery"]);

    // A new create, then three closes at once: one recovery.
    expect((await create(body)).status).toBe(202);
    await Promise.all(Array.from({ length: 3 }, () => close()));
    expect(await kinds()).toEqual(["opened", "repeat", "recovery", "repeat", "recovery"]);
  });

  it("without an alias the message is the identity; P1..P5 map onto sev1..sev4", async () => {
    const message = unique("Disk 95% full");
    await create({ message });
    await create({ message });
    const rows = await byTitle(message);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ severity: "sev3", entity: null });
    for (const [priority, severity] of [
      ["P2", "sev2"],
      ["P3", "sev3"],
      ["P4", "sev4"],
      ["P5", "sev4"],
    ]) {
      const title = unique(`priority ${priority}`);
      await create({ message: title, priority });
      expect((await byTitle(title))[0].severity).toBe(severity);
    }
  });

  it("a close for an alert that does not exist is accepted, and its status says so; nothing opens", async () => {
    const before = (await listIncidents(ctx.app, ctx.creds.owner)).length;
    for (const path of [
      `/v2/alerts/${unique("nothing")}/close?identifierType=alias`,
      "/v2/alerts/123/close?identifierType=tiny",
      `/v2/alerts/00000000-0000-4000-8000-000000000000/acknowledge`,
    ]) {
      const res = await call("POST", path, {});
      expect(res.status).toBe(202);
      expect((await status(res.body.requestId)).body.data).toMatchObject({
        success: true,
        isSuccess: false,
        status: "Alert does not exist",
        alertId: "",
        outcome: "ignored",
      });
    }
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before);
  });

  it("401 in Opsgenie's shape for a missing, wrong or non-GenieKey credential", async () => {
    for (const options of [{ key: null }, { key: "f".repeat(64) }, { authorization: `Bearer ${ctx.creds.ingestToken}` }]) {
      const res = await create({ message: "nope" }, options);
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ message: "Could not authenticate", took: expect.any(Number), requestId: expect.any(String) });
    }
    expect((await status("00000000-0000-4000-8000-000000000000", "f".repeat(64))).status).toBe(401);
  });

  it.each([
    ["an empty message", { message: " " }, { message: "Message can not be empty." }],
    ["no message", { alias: "a" }, { message: "Message can not be empty." }],
    ["an unknown priority", { message: "m", priority: "P0" }, { priority: "Priority should be one of [P1, P2, P3, P4, P5]." }],
    ["an alias over 512 characters", { message: "m", alias: "a".repeat(513) }, { alias: "Alias can not be longer than 512 characters." }],
    ["tags that are not a list", { message: "m", tags: "a,b" }, { tags: "Tags should be a list of strings." }],
    ["a message that is not a string", { message: 42 }, { message: "Message should be a string." }],
  ])("422 in Opsgenie's shape: %s", async (_name, body, errors) => {
    const res = await create(body);
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ message: UNPROCESSABLE, errors, took: expect.any(Number), requestId: expect.any(String) });
  });

  it("422 for a body that is not JSON and for an unknown identifierType; 413 over 1 MiB", async () => {
    expect((await create(undefined, { raw: "message=hi" })).body).toEqual({
      message: UNPROCESSABLE,
      errors: { body: "Request body should be valid JSON." },
      took: expect.any(Number),
      requestId: expect.any(String),
    });
    const bad = await call("POST", "/v2/alerts/x/close?identifierType=name", {});
    expect(bad.status).toBe(422);
    expect(bad.body.errors).toEqual({ identifierType: "Identifier type should be one of [id, alias, tiny]." });
    const big = await create({ message: "big", description: "x".repeat(1024 * 1024) });
    expect(big.status).toBe(413);
    expect(big.body).toEqual({ message: "Request body is larger than 1048576 bytes", took: expect.any(Number), requestId: expect.any(String) });
  });

  it("request status: 404 in Opsgenie's shape for an unknown id, and another organization's request is unknown", async () => {
    const unknown = await status("00000000-0000-4000-8000-000000000000");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ message: "Request not found. It might not be processed, yet.", took: expect.any(Number), requestId: expect.any(String) });
    expect((await status("not-a-uuid")).status).toBe(404);
    const mine = await create({ message: unique("mine") });
    expect((await status(mine.body.requestId, ctx.other.ingestToken)).status).toBe(404);
    expect((await status(mine.body.requestId)).status).toBe(200);
  });

  it("a maintenance window covering the source suppresses: 202, nothing opens, the status says suppressed", async () => {
    const message = unique("og maintenance");
    await duringMaintenance(ctx.app, ctx.creds.owner, { sources: ["opsgenie"] }, async () => {
      const res = await create({ message });
      expect(res.status).toBe(202);
      expect((await status(res.body.requestId)).body.data).toMatchObject({
        isSuccess: false,
        status: "Suppressed by a maintenance window",
        outcome: "suppressed",
      });
    });
    expect(await byTitle(message)).toHaveLength(0);
  });

  it("hostile bodies stay data: the message is cut to 130 characters as Opsgenie does", async () => {
    const res = await create(undefined, {
      raw: JSON.stringify(fixture("opsgenie/hostile-create-alert.json")).replace('"message"', '"__proto__":{"polluted":true},"message"'),
    });
    expect(res.status).toBe(202);
    const read = await status(res.body.requestId);
    const incident = await getIncident(ctx.app, ctx.creds.owner, read.body.data.alertId);
    expect([...incident.title]).toHaveLength(130);
    expect(incident.severity).toBe("sev4");
    expect(incident.entity).toEqual({ kind: "service", id: "__proto__" });
    expect(incident.timeline[0].data.details).toEqual({ ok: "yes" });
    expect(({} as any).polluted).toBeUndefined();
  });
}
