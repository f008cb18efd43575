import { describe, expect, it } from "vitest";
import {
  duringMaintenance,
  fixture,
  getIncident,
  listIncidents,
  postTrigger,
  PUBLIC_URL,
  resolveIncident,
  unique,
  UUID,
  type SuiteContext,
} from "./triggers-kit.js";

/**
 * `POST /triggers`, the metrics-monitor shape: the spec's eight numbered rules, every row of its
 * field table, the error rows, and 200 identical deliveries at once.
 */
export function metricsMonitorSuite(ctx: SuiteContext): void {
  const send = (body: unknown) => postTrigger(ctx.app, ctx.creds.ingestToken, body);
  const incident = (id: string) => getIncident(ctx.app, ctx.creds.owner, id);

  /** The triggered fixture as its monitor would send it for another alert. */
  function triggered(overrides: Record<string, unknown> = {}) {
    return { ...fixture("datadog/custom-body-triggered.json"), alert_id: unique("alert"), event_id: unique("event"), ...overrides };
  }

  describe("the numbered rules, with the fixtures", () => {
    let incidentId: string;

    it("1. a new alert with no open room answers 201 opened with entity, proposedSeverity and workspaceUrl", async () => {
      const body = fixture("datadog/custom-body-triggered.json");
      const res = await send(body);
      expect(res.status).toBe(201);
      expect(res.body).toEqual({
        outcome: "opened",
        incidentId: expect.stringMatching(UUID),
        // The fixture's tags are one comma-separated string: not read as tags, so no service.
        entity: null,
        // alert_priority P2 (priority is the event priority `normal`).
        proposedSeverity: "sev2",
        workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${res.body.incidentId}`,
        reason: null,
      });
      incidentId = res.body.incidentId;

      const opened = await incident(incidentId);
      expect(opened).toMatchObject({
        id: incidentId,
        title: body.title,
        severity: "sev2",
        state: "open",
        source: "metrics-monitor",
        entity: null,
        workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${incidentId}`,
      });
      // The first entry holds the summary, the link and the alert reference.
      expect(opened.timeline).toHaveLength(1);
      expect(opened.timeline[0]).toMatchObject({
        kind: "opened",
        summary: body.body,
        link: body.link,
        alertRef: body.alert_id,
        eventId: body.event_id,
        at: "2024-06-12T10:05:12Z",
      });
      const listed = await listIncidents(ctx.app, ctx.creds.owner, "open");
      expect(listed.map((i) => i.id)).toContain(incidentId);
    });

    it("2. the same alert_id with a different event_id answers 200 attached with the same incidentId, and records a repeat", async () => {
      const body = { ...fixture("datadog/custom-body-triggered.json"), alert_transition: "Re-Triggered", event_id: "7612990000000000001" };
      const res = await send(body);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        outcome: "attached",
        incidentId,
        proposedSeverity: "sev2",
        workspaceUrl: `${PUBLIC_URL}/o/acme/incidents/${incidentId}`,
      });
      const { timeline } = await incident(incidentId);
      expect(timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
      expect(timeline[1].eventId).toBe("7612990000000000001");
    });

    it("3. the same event_id again answers attached and is not recorded again", async () => {
      for (const body of [
        fixture("datadog/custom-body-triggered.json"),
        { ...fixture("datadog/custom-body-triggered.json"), alert_transition: "Re-Triggered", event_id: "7612990000000000001" },
      ]) {
        const res = await send(body);
        expect(res.status).toBe(200);
        expect(res.body).toMatchObject({ outcome: "attached", incidentId });
      }
      const { timeline } = await incident(incidentId);
      expect(timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
    });

    it("5. No Data on an open room answers 200 recorded", async () => {
      const res = await send(fixture("datadog/custom-body-no-data.json"));
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ outcome: "recorded", incidentId });
      const { timeline, state } = await incident(incidentId);
      expect(state).toBe("open");
      expect(timeline.at(-1)).toMatchObject({ kind: "no_data", eventId: "7613011462258811904" });
    });

    it("4. Recovered with a new event_id answers 200 recorded, and the room stays open", async () => {
      const res = await send(fixture("datadog/custom-body-recovered.json"));
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ outcome: "recorded", incidentId });
      const got = await incident(incidentId);
      expect(got.state).toBe("open");
      expect(got.timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat", "no_data", "recovery"]);
      expect(got.timeline.at(-1)).toMatchObject({ eventId: "7612998540113382711", summary: fixture("datadog/custom-body-recovered.json").body });
    });

    it("6. Recovered or No Data with an event_id the room already holds answers 200 ignored", async () => {
      for (const name of ["datadog/custom-body-recovered.json", "datadog/custom-body-no-data.json"]) {
        const res = await send(fixture(name));
        expect(res.status, name).toBe(200);
        expect(res.body.outcome, name).toBe("ignored");
        expect(res.body.incidentId, name).toBeNull();
      }
      expect((await incident(incidentId)).timeline).toHaveLength(4);
    });

    it("6. Recovered or No Data with no open room answers 200 ignored, and nothing opens", async () => {
      const before = await listIncidents(ctx.app, ctx.creds.owner);
      const alertId = unique("never-fired");
      for (const name of ["datadog/custom-body-recovered.json", "datadog/custom-body-no-data.json"]) {
        const res = await send({ ...fixture(name), alert_id: alertId, event_id: unique("event") });
        expect(res.status, name).toBe(200);
        expect(res.body).toMatchObject({ outcome: "ignored", incidentId: null });
      }
      expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    });

    it("7. an active maintenance window that matches answers 200 suppressed, and nothing opens", async () => {
      const before = await listIncidents(ctx.app, ctx.creds.owner);
      await duringMaintenance(ctx.app, ctx.creds.owner, { sources: ["metrics-monitor"] }, async () => {
        const res = await send(triggered());
        expect(res.status).toBe(200);
        expect(res.body).toMatchObject({ outcome: "suppressed", incidentId: null });
      });
      expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    });

    it("8. after a person resolves the room, the next alert opens a new room; after archive, again", async () => {
      await resolveIncident(ctx.app, ctx.creds.owner, incidentId, "resolve");
      const next = { ...fixture("datadog/custom-body-triggered.json"), event_id: "7613020000000000001" };
      const reopened = await send(next);
      expect(reopened.status).toBe(201);
      expect(reopened.body.outcome).toBe("opened");
      expect(reopened.body.incidentId).not.toBe(incidentId);
      expect((await incident(incidentId)).state).toBe("resolved");

      await resolveIncident(ctx.app, ctx.creds.owner, reopened.body.incidentId, "archive");
      const again = await send({ ...next, event_id: "7613020000000000002" });
      expect(again.status).toBe(201);
      expect(again.body.incidentId).not.toBe(reopened.body.incidentId);
      expect((await incident(reopened.body.incidentId)).state).toBe("archived");
      // A recovery never closes anything: the newest room stays open.
      const recovered = await send({ ...fixture("datadog/custom-body-recovered.json"), event_id: "7613020000000000003" });
      expect(recovered.body).toMatchObject({ outcome: "recorded", incidentId: again.body.incidentId });
      expect((await incident(again.body.incidentId)).state).toBe("open");
    });
  });

  describe("every row of the field table", () => {
    it.each([
      ["P1", "warning", "sev1"],
      ["P2", "warning", "sev2"],
      ["P3", "error", "sev3"],
      ["P4", "error", "sev4"],
      ["P5", "warning", "sev4"],
    ])("priority %s wins over alert_type %s: %s", async (priority, alertType, severity) => {
      const res = await send(triggered({ priority, alert_priority: undefined, alert_type: alertType, alert_transition: "Triggered" }));
      expect(res.status).toBe(201);
      expect(res.body.proposedSeverity).toBe(severity);
      expect((await incident(res.body.incidentId)).severity).toBe(severity);
    });

    it.each([
      ["error", "sev2"],
      ["warning", "sev3"],
      ["anything else", "sev3"],
    ])("without a priority, alert_type %s is %s", async (alertType, severity) => {
      const res = await send(triggered({ priority: "normal", alert_priority: undefined, alert_type: alertType }));
      expect(res.status).toBe(201);
      expect(res.body.proposedSeverity).toBe(severity);
    });

    it("title becomes the incident title; a missing title gives a generic metrics alert title", async () => {
      const titled = await send(triggered({ title: "Disk full on db-7" }));
      expect((await incident(titled.body.incidentId)).title).toBe("Disk full on db-7");
      const { title: _title, ...untitled } = triggered();
      const res = await send(untitled);
      expect(res.status).toBe(201);
      expect((await incident(res.body.incidentId)).title).toBe("Metrics alert");
    });

    it("alert_transition Triggered, Re-Triggered and Warn are alerts; Recovered a recovery; No Data a no-data notice", async () => {
      const alertId = unique("transitions");
      const opened = await send(triggered({ alert_id: alertId, alert_transition: "Warn" }));
      expect(opened.status).toBe(201);
      const outcomes: string[] = [];
      for (const transition of ["Triggered", "Re-Triggered", "Warn", "No Data", "Recovered"]) {
        const res = await send(triggered({ alert_id: alertId, alert_transition: transition }));
        expect(res.status).toBe(200);
        expect(res.body.incidentId).toBe(opened.body.incidentId);
        outcomes.push(res.body.outcome);
      }
      expect(outcomes).toEqual(["attached", "attached", "attached", "recorded", "recorded"]);
      const { timeline } = await incident(opened.body.incidentId);
      expect(timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat", "repeat", "repeat", "no_data", "recovery"]);
    });

    it("legacy payloads without alert_transition: alert_type success is a recovery, info a no-data notice", async () => {
      const alertId = unique("legacy");
      const legacy = (alertType: string) => {
        const { alert_transition: _t, ...body } = triggered({ alert_id: alertId, alert_type: alertType });
        return body;
      };
      // Neither opens a room.
      for (const alertType of ["success", "info"]) {
        const res = await send(legacy(alertType));
        expect(res.status).toBe(200);
        expect(res.body.outcome).toBe("ignored");
      }
      const opened = await send(legacy("error"));
      expect(opened.status).toBe(201);
      expect(opened.body.proposedSeverity).toBe("sev2");
      const info = await send(legacy("info"));
      const success = await send(legacy("success"));
      expect([info.body.outcome, success.body.outcome]).toEqual(["recorded", "recorded"]);
      const { timeline } = await incident(opened.body.incidentId);
      expect(timeline.map((e: any) => e.kind)).toEqual(["opened", "no_data", "recovery"]);
    });

    it("without alert_id the title plus the sorted tags is the identity", async () => {
      const title = `${unique("Latency")} high on checkout`;
      const base = () => {
        const { alert_id: _a, ...body } = triggered({ title, alert_transition: "Triggered" });
        return body;
      };
      const first = await send({ ...base(), tags: ["env:prod", "service:checkout", "team:payments"] });
      expect(first.status).toBe(201);
      // The same tags in another order: the same alert.
      const reordered = await send({ ...base(), tags: ["team:payments", "env:prod", "service:checkout"] });
      expect(reordered.status).toBe(200);
      expect(reordered.body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });
      // Other tags: another alert.
      const otherTags = await send({ ...base(), tags: ["env:staging", "service:checkout", "team:payments"] });
      expect(otherTags.status).toBe(201);
      expect(otherTags.body.incidentId).not.toBe(first.body.incidentId);
      // Another title with the same tags: another alert.
      const otherTitle = await send({ ...base(), title: `${title} (p99)`, tags: ["env:prod", "service:checkout", "team:payments"] });
      expect(otherTitle.status).toBe(201);
      // The monitor's recovery title carries its transition word; it still finds the room.
      const recovery = await send({
        ...base(),
        title: `[Recovered] ${title}`,
        alert_transition: "Recovered",
        tags: ["service:checkout", "team:payments", "env:prod"],
      });
      expect(recovery.body).toMatchObject({ outcome: "recorded", incidentId: first.body.incidentId });
    });

    it("an empty tag is skipped, and a service:<name> tag resolves the entity {kind: service, id}", async () => {
      const title = `${unique("Queue depth")} on orders`;
      const base = () => {
        const { alert_id: _a, ...body } = triggered({ title });
        return body;
      };
      const first = await send({ ...base(), tags: ["", "service:orders", "env:prod", ""] });
      expect(first.status).toBe(201);
      expect(first.body.entity).toEqual({ kind: "service", id: "orders" });
      expect((await incident(first.body.incidentId)).entity).toEqual({ kind: "service", id: "orders" });
      const withoutEmpty = await send({ ...base(), tags: ["env:prod", "service:orders"] });
      expect(withoutEmpty.body).toMatchObject({ outcome: "attached", incidentId: first.body.incidentId });
    });

    it("a comma-separated tags string is not read as tags: the incident opens with no service", async () => {
      const res = await send(triggered({ tags: "env:prod,service:checkout,team:payments" }));
      expect(res.status).toBe(201);
      expect(res.body.entity).toBeNull();
      expect((await incident(res.body.incidentId)).entity).toBeNull();
    });

    it("an array tags alone (no alert_type) is recognized as this shape", async () => {
      const res = await send({ title: unique("Tags only"), tags: ["service:search"] });
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({ outcome: "opened", entity: { kind: "service", id: "search" }, proposedSeverity: "sev3" });
      expect((await incident(res.body.incidentId)).source).toBe("metrics-monitor");
    });

    it("body is the summary of the first entry and link is kept with the alert reference", async () => {
      const body = triggered({ body: "Checkout p99 above 2s", link: "https://monitor.example.com/monitors/42" });
      const res = await send(body);
      const [first] = (await incident(res.body.incidentId)).timeline;
      expect(first).toMatchObject({
        kind: "opened",
        summary: "Checkout p99 above 2s",
        link: "https://monitor.example.com/monitors/42",
        alertRef: body.alert_id,
      });
    });
  });

  describe("error rows", () => {
    it("401 Missing trigger ingest token without an Authorization: Bearer header, and nothing opens", async () => {
      const before = await listIncidents(ctx.app, ctx.creds.owner);
      for (const headers of [{}, { authorization: `Basic ${Buffer.from("a:b").toString("base64")}` }, { authorization: "Bearer" }] as Record<
        string,
        string
      >[]) {
        const res = await ctx.app.call("POST", "/triggers", { headers: { "content-type": "application/json", ...headers }, raw: JSON.stringify(triggered()) });
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ error: "Missing trigger ingest token" });
      }
      expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    });

    it("401 Invalid trigger ingest token for a mistyped token", async () => {
      const mistyped = ctx.creds.ingestToken.slice(0, -1) + (ctx.creds.ingestToken.endsWith("0") ? "1" : "0");
      for (const token of [mistyped, "not-a-token", ctx.creds.chatSecret]) {
        const res = await postTrigger(ctx.app, token, triggered());
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ error: "Invalid trigger ingest token" });
      }
    });

    it("422 Unrecognized trigger payload when neither a string alert_type nor an array tags is present, and no incident", async () => {
      const before = await listIncidents(ctx.app, ctx.creds.owner);
      for (const body of [{ title: "no shape", tags: "service:checkout" }, { title: "alert_type must be a string", alert_type: 3 }, { hello: "world" }, {}]) {
        const res = await send(body);
        expect(res.status, JSON.stringify(body)).toBe(422);
        expect(res.body).toEqual({ error: "Unrecognized trigger payload" });
      }
      expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    });

    it("a replaced token stops working at once; the new one works", async () => {
      const old = ctx.creds.ingestToken;
      const reissued = await ctx.app.call("POST", "/o/acme/triggers/ingest-token", { token: ctx.creds.owner });
      expect(reissued.body.token).toMatch(/^[0-9a-f]{64}$/);
      ctx.creds.ingestToken = reissued.body.token;
      const refused = await postTrigger(ctx.app, old, triggered());
      expect(refused.status).toBe(401);
      expect(refused.body).toEqual({ error: "Invalid trigger ingest token" });
      expect((await send(triggered())).status).toBe(201);
    });
  });

  describe("exactly once under concurrency", () => {
    it("200 concurrent identical deliveries: exactly 1 opened (201) and 199 attached, one incident, one timeline entry", async () => {
      const body = JSON.stringify(triggered({ title: unique("Thundering herd") }));
      // Spread over every gateway, so in the cluster the deliveries cross intake replicas.
      const answers = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          postTrigger(ctx.app, ctx.creds.ingestToken, undefined, { raw: body, url: ctx.app.gatewayUrls[i % ctx.app.gatewayUrls.length] }),
        ),
      );
      const statuses = answers.map((a) => a.status);
      expect(statuses.filter((s) => s === 201)).toHaveLength(1);
      expect(statuses.filter((s) => s === 200)).toHaveLength(199);
      const outcomes = answers.map((a) => a.body.outcome);
      expect(outcomes.filter((o) => o === "opened")).toHaveLength(1);
      expect(outcomes.filter((o) => o === "attached")).toHaveLength(199);
      const ids = new Set(answers.map((a) => a.body.incidentId));
      expect(ids.size).toBe(1);
      const [id] = [...ids];
      const got = await incident(id!);
      expect(got.timeline).toHaveLength(1);
      const title = JSON.parse(body).title;
      expect((await listIncidents(ctx.app, ctx.creds.owner)).filter((i) => i.title === title)).toHaveLength(1);
    }, 60_000);
  });
}
