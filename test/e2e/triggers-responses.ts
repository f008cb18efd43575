import { request } from "node:http";
import { expect, it } from "vitest";
import { auditEvents, duringMaintenance, fixture, getIncident, listIncidents, postTrigger, unique, type SuiteContext } from "./triggers-kit.js";

/** Maintenance windows on the shared endpoint, and bodies sent to break it. */

export function maintenanceSuite(ctx: SuiteContext): void {
  const send = (body: unknown) => postTrigger(ctx.app, ctx.creds.ingestToken, body);
  const metricsAlert = (tags: string[] = []) => ({
    ...fixture("datadog/custom-body-triggered.json"),
    alert_id: unique("mw-alert"),
    event_id: unique("mw-event"),
    tags,
  });
  const sentry = () => {
    const body = fixture("sentry/event-alert-triggered.json");
    body.data.event.event_id = unique("mw-evt");
    return body;
  };
  const legacySentry = () => {
    const body = fixture("sentry/legacy-webhooks-plugin.json");
    body.event.event_id = body.event.id = unique("mw-evt");
    return { ...body, id: unique("mw-issue") };
  };

  async function expectSuppressed(body: unknown) {
    const res = await send(body);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ outcome: "suppressed", incidentId: null, workspaceUrl: null });
    return res;
  }

  it("a window by source suppresses that source only: 200 suppressed and nothing opens; other sources still open", async () => {
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    await duringMaintenance(ctx.app, ctx.creds.owner, { sources: ["error-tracker"] }, async () => {
      await expectSuppressed(sentry());
      await expectSuppressed(legacySentry());
      expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
      const other = await send(metricsAlert());
      expect(other.status).toBe(201);
    });
    // Over: the same source opens again.
    expect((await send(sentry())).status).toBe(201);
  });

  it("a window by entity suppresses deliveries about that entity only", async () => {
    await duringMaintenance(ctx.app, ctx.creds.owner, { entities: [{ kind: "service", id: "checkout-api" }] }, async () => {
      // The legacy plugin names project_slug checkout-api as the service.
      await expectSuppressed(legacySentry());
      await expectSuppressed(metricsAlert(["service:checkout-api", "env:prod"]));
      // No entity, or another one: not covered.
      expect((await send(sentry())).status).toBe(201);
      expect((await send(metricsAlert(["service:search"]))).status).toBe(201);
    });
  });

  it("a window over everything suppresses every source, also a delivery for an incident that is already open, and records nothing on it", async () => {
    const alert = metricsAlert(["service:orders"]);
    const opened = await send(alert);
    expect(opened.status).toBe(201);
    const before = await listIncidents(ctx.app, ctx.creds.owner);
    const windowId = await duringMaintenance(ctx.app, ctx.creds.owner, undefined, async (id) => {
      await expectSuppressed({ ...alert, event_id: unique("mw-event") });
      await expectSuppressed(sentry());
      await expectSuppressed(fixture("aws/eventbridge-cloudwatch-alarm-state-change.json"));
      await expectSuppressed(fixture("azure/common-schema-log-alerts-v2-fired.json"));
      return id;
    });
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before.length);
    expect((await getIncident(ctx.app, ctx.creds.owner, opened.body.incidentId)).timeline).toHaveLength(1);
    // Suppressed deliveries stay visible to an operator: one audit record each.
    const suppressed = await auditEvents(
      ctx.app,
      ctx.creds.owner,
      "trigger.suppressed",
      (events) => events.filter((e) => e.data.maintenanceWindowId === windowId).length >= 4,
    );
    const ofWindow = suppressed.filter((e) => e.data.maintenanceWindowId === windowId);
    expect(ofWindow.map((e) => e.data.source).sort()).toEqual(["cloud-monitor", "error-tracker", "log-analytics", "metrics-monitor"]);
  });

  it("a window that has not started yet suppresses nothing", async () => {
    const now = Date.now();
    const created = await ctx.app.call("POST", "/o/acme/maintenance-windows", {
      token: ctx.creds.owner,
      body: { startsAt: new Date(now + 3_600_000).toISOString(), endsAt: new Date(now + 7_200_000).toISOString(), reason: "tomorrow" },
    });
    expect(created.status).toBe(201);
    try {
      expect((await send(metricsAlert())).status).toBe(201);
    } finally {
      await ctx.app.call("DELETE", `/o/acme/maintenance-windows/${created.body.id}`, { token: ctx.creds.owner });
    }
  });
}

/** Sends raw bytes with node:http, so a refused upload still yields the answer the server gave. */
function rawPost(url: string, path: string, headers: Record<string, string | number>, body: Buffer): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method: "POST", headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null });
      });
    });
    // The server may close before taking the whole body; its answer is what counts.
    req.on("error", (err) => reject(err));
    req.end(body);
  });
}

export function hostileBodiesSuite(ctx: SuiteContext): void {
  const raw = (body: string | Buffer, contentType = "application/json") => postTrigger(ctx.app, ctx.creds.ingestToken, undefined, { raw: body, contentType });
  let incidentsBefore = 0;

  it("before: count the incidents", async () => {
    incidentsBefore = (await listIncidents(ctx.app, ctx.creds.owner)).length;
    expect(incidentsBefore).toBeGreaterThanOrEqual(0);
  });

  it.each([
    ["not JSON", "alert_type=error&title=x", "the body is not valid JSON"],
    ["truncated JSON", '{"alert_type": "error", "title": ', "the body is not valid JSON"],
    ["an empty body", "", "the body is empty"],
    ["bytes that are not UTF-8", Buffer.from([0xff, 0xfe, 0x7b, 0x00, 0xc3]), "the body is not valid JSON"],
  ])("%s: 422 with a clear message", async (_case, body, details) => {
    const res = await raw(body);
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ error: "Unrecognized trigger payload", details });
  });

  it.each([
    ["a JSON array", JSON.stringify([{ alert_type: "error", title: "inside an array" }])],
    ["a JSON string", JSON.stringify("alert_type")],
    ["a JSON number", "42"],
    ["null", "null"],
  ])("%s: 422 Unrecognized trigger payload", async (_case, body) => {
    const res = await raw(body);
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ error: "Unrecognized trigger payload" });
  });

  it("a body nested too deep: 422 saying so, for arrays and for objects, even when the top level is a valid shape", async () => {
    const arrays = await raw(`${"[".repeat(50_000)}${"]".repeat(50_000)}`);
    expect(arrays.status).toBe(422);
    expect(arrays.body).toEqual({ error: "Unrecognized trigger payload", details: "the body is nested deeper than 64 levels" });
    let nested = '"bottom"';
    for (let i = 0; i < 1_000; i++) nested = `{"a":${nested}}`;
    const objects = await raw(`{"alert_type":"error","title":"deep","extra":${nested}}`);
    expect(objects.status).toBe(422);
    expect(objects.body.details).toBe("the body is nested deeper than 64 levels");
  });

  it("a body over 1 MiB: 413, whether its length is declared or it is streamed", async () => {
    const big = Buffer.from(JSON.stringify({ alert_type: "error", title: "big", body: "x".repeat(1024 * 1024 + 10) }));
    const declared = await rawPost(
      ctx.app.url,
      "/triggers",
      { authorization: `Bearer ${ctx.creds.ingestToken}`, "content-type": "application/json", "content-length": big.byteLength },
      big,
    );
    expect(declared.status).toBe(413);
    expect(declared.body).toEqual({ error: "request body is larger than 1048576 bytes" });
    const streamed = await rawPost(
      ctx.app.url,
      "/triggers",
      { authorization: `Bearer ${ctx.creds.ingestToken}`, "content-type": "application/json", "transfer-encoding": "chunked" },
      big,
    );
    expect(streamed.status).toBe(413);
  });

  it("just under 1 MiB is read: a long summary is kept (cut to 8 KiB) and the incident opens", async () => {
    const res = await raw(JSON.stringify({ alert_type: "error", title: unique("Long body"), body: "y".repeat(1000 * 1000) }));
    expect(res.status).toBe(201);
    const [first] = (await getIncident(ctx.app, ctx.creds.owner, res.body.incidentId)).timeline;
    expect(first.summary).toHaveLength(8192);
  });

  it("__proto__, constructor and prototype keys are plain data: never recognized through, never polluting, never a 5xx", async () => {
    // A shape hidden behind __proto__ is not this body's shape.
    const hidden = await raw('{"__proto__": {"alert_type": "error", "tags": ["service:x"]}, "title": "hidden"}');
    expect(hidden.status).toBe(422);
    expect(hidden.body).toEqual({ error: "Unrecognized trigger payload" });

    const title = unique("Proto");
    const body = `{"alert_type":"error","title":"${title}","tags":["service:proto"],"__proto__":{"alert_id":"injected","isAdmin":true,"tags":["service:evil"]},"constructor":{"prototype":{"polluted":true}}}`;
    const opened = await raw(body);
    expect(opened.status).toBe(201);
    expect(opened.body.entity).toEqual({ kind: "service", id: "proto" });
    // The identity is the title and tags, not an alert_id smuggled in through __proto__.
    const again = await raw(body);
    expect(again.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    const got = await getIncident(ctx.app, ctx.creds.owner, opened.body.incidentId);
    expect(got.timeline[0].alertRef).toBeNull();
    const probe: Record<string, unknown> = {};
    expect(probe.isAdmin).toBeUndefined();
    expect(probe.polluted).toBeUndefined();

    const remote = await raw('{"serviceSource":"remote","__proto__":{"connectionId":"x","title":"t","severity":"sev1"}}');
    expect(remote.status).toBe(422);
    expect(remote.body.error).toBe("connectionId is required");
  });

  it("NUL characters and odd Unicode in strings are stored, not refused", async () => {
    const res = await raw(JSON.stringify({ alert_type: "error", title: `${unique("nul")}\u0000 \ud800 end`, tags: ["service:\u0000odd"] }));
    expect(res.status).toBe(201);
  });

  it("after all of it: nothing opened from a refused body, the service is healthy, and a real delivery still opens", async () => {
    expect((await fetch(`${ctx.app.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${ctx.app.url}/readyz`)).status).toBe(200);
    const incidents = await listIncidents(ctx.app, ctx.creds.owner);
    // Three opened above (long body, __proto__, NUL).
    expect(incidents).toHaveLength(incidentsBefore + 3);
    const res = await postTrigger(ctx.app, ctx.creds.ingestToken, { ...fixture("datadog/custom-body-triggered.json"), alert_id: unique("after") });
    expect(res.status).toBe(201);
  });
}
