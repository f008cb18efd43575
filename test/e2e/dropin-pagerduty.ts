import { expect, it } from "vitest";
import { callApi } from "../support/app.js";
import {
  auditEvents,
  duringMaintenance,
  fixture,
  getIncident,
  listIncidents,
  unique,
  type Answer,
  type Credentials,
  type SuiteContext,
} from "./triggers-kit.js";

/** PagerDuty Events API v2 (`POST /v2/enqueue`, `POST /v2/change/enqueue`) over HTTP. */

export interface DropinContext extends SuiteContext {
  /** An organization with nothing open, for change events that find no incident. */
  other: Credentials & { slug: string };
}

const INVALID = { status: "invalid event", message: "Event object is invalid" };

export function pagerDutySuite(ctx: DropinContext): void {
  const enqueue = (body: unknown, options: { raw?: string | Buffer; path?: string } = {}): Promise<Answer> =>
    callApi(ctx.app.url, "POST", options.path ?? "/v2/enqueue", {
      headers: { "content-type": "application/json" },
      raw: options.raw ?? JSON.stringify(body),
    });
  const event = (name: string, changes: Record<string, unknown> = {}) => ({ ...fixture(`pagerduty/${name}`), routing_key: ctx.creds.ingestToken, ...changes });
  const byTitle = async (title: string) => (await listIncidents(ctx.app, ctx.creds.owner)).filter((incident) => incident.title === title);

  it("trigger opens an incident: 202 in PagerDuty's shape with the dedup key; every field lands on the entry", async () => {
    const dedupKey = unique("pd");
    const body = event("events-v2-trigger-full.json", { dedup_key: dedupKey });
    const res = await enqueue(body);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ status: "success", message: "Event processed", dedup_key: dedupKey });
    const [row] = (await listIncidents(ctx.app, ctx.creds.owner)).filter(
      (incident) => incident.source === "pagerduty-events" && incident.title === body.payload.summary,
    );
    const incident = await getIncident(ctx.app, ctx.creds.owner, row.id);
    expect(incident).toMatchObject({
      title: body.payload.summary,
      severity: "sev1",
      state: "open",
      source: "pagerduty-events",
      entity: { kind: "service", id: "checkout-api" },
    });
    expect(incident.timeline).toHaveLength(1);
    const [opened] = incident.timeline;
    expect(opened).toMatchObject({
      kind: "opened",
      at: "2024-06-12T10:02:17.513Z",
      summary: body.payload.summary,
      link: "https://runbooks.example.com/HighErrorRate",
      alertRef: dedupKey,
    });
    expect(opened.data).toMatchObject({
      eventAction: "trigger",
      dedupKey,
      client: "Alert Intake",
      clientUrl: "https://intake.example.com/alerts/7b1c",
      payload: {
        source: "checkout-api.prod.example.com",
        component: "checkout-api",
        group: "checkout",
        class: "http 5xx rate",
        custom_details: { ratio: 0.073, window: "5m" },
      },
      links: [{ href: "https://runbooks.example.com/HighErrorRate", text: "Runbook" }],
      images: [{ alt: "5xx ratio, last hour" }],
    });
    expect(JSON.stringify(opened.data)).not.toContain(ctx.creds.ingestToken);

    // Same dedup key: attached (a repeat); acknowledge: an entry; resolve: a recovery. Never resolved.
    expect((await enqueue(body)).status).toBe(202);
    expect((await enqueue(event("events-v2-acknowledge.json", { dedup_key: dedupKey }))).body).toEqual({
      status: "success",
      message: "Event processed",
      dedup_key: dedupKey,
    });
    expect((await enqueue(event("events-v2-resolve.json", { dedup_key: dedupKey }))).status).toBe(202);
    const after = await getIncident(ctx.app, ctx.creds.owner, row.id);
    expect(after.state).toBe("open");
    expect(after.timeline.map((entry: any) => entry.kind)).toEqual(["opened", "repeat", "acknowledged", "recovery"]);
    // The sender's acknowledgement acknowledges the incident, by the source's badge, as a responder's would.
    expect(after).toMatchObject({ acknowledgedAt: after.timeline[2].at, acknowledgedBy: after.source });
    expect(await byTitle(body.payload.summary)).toHaveLength(1);
  });

  it("the same trigger again records a repeat; a resolve sent again with no trigger between records nothing, even concurrent", async () => {
    const dedupKey = unique("pd-once");
    const trigger = event("events-v2-trigger-full.json", {
      dedup_key: dedupKey,
      payload: { ...fixture("pagerduty/events-v2-trigger-full.json").payload, summary: dedupKey },
    });
    const resolve = event("events-v2-resolve.json", { dedup_key: dedupKey });
    expect((await enqueue(trigger)).status).toBe(202);
    expect((await enqueue(trigger)).status).toBe(202);
    const [row] = await byTitle(dedupKey);
    const kinds = async () => (await getIncident(ctx.app, ctx.creds.owner, row.id)).timeline.map((entry: any) => entry.kind);
    expect(await kinds()).toEqual(["opened", "repeat"]);

    for (let k = 0; k < 2; k++) {
      const res = await enqueue(resolve);
      expect(res).toMatchObject({ status: 202, body: { status: "success", message: "Event processed", dedup_key: dedupKey } });
    }
    expect(await kinds()).toEqual(["opened", "repeat", "recovery"]);

    // A new trigger, then five copies of its resolve at once: one recovery.
    expect((await enqueue(trigger)).status).toBe(202);
    const resolves = await Promise.all(Array.from({ length: 5 }, () => enqueue(resolve)));
    expect(resolves.map((r) => r.status)).toEqual(Array(5).fill(202));
    expect(await kinds()).toEqual(["opened", "repeat", "recovery", "repeat", "recovery"]);
  });

  it("a trigger without dedup_key gets one generated and returned; resolve with it records the recovery", async () => {
    const summary = unique("Disk full");
    const body = event("events-v2-trigger-minimal.json");
    body.payload.summary = summary;
    const res = await enqueue(body);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ status: "success", message: "Event processed", dedup_key: expect.stringMatching(/^[0-9a-f]{32}$/) });
    const [row] = await byTitle(summary);
    expect(row).toMatchObject({ severity: "sev3", entity: null });
    await enqueue(event("events-v2-resolve.json", { dedup_key: res.body.dedup_key }));
    expect((await getIncident(ctx.app, ctx.creds.owner, row.id)).timeline.map((entry: any) => entry.kind)).toEqual(["opened", "recovery"]);
    // Another trigger without a key is another alert.
    const again = await enqueue(body);
    expect(again.body.dedup_key).not.toBe(res.body.dedup_key);
    expect(await byTitle(summary)).toHaveLength(2);
  });

  it("a retry with the same Idempotency-Key gets the same generated dedup key and records nothing more", async () => {
    const summary = unique("idempotent");
    const body = JSON.stringify(event("events-v2-trigger-minimal.json", { payload: { summary, source: "h", severity: "info" } }));
    const post = () =>
      callApi(ctx.app.url, "POST", "/v2/enqueue", { headers: { "content-type": "application/json", "idempotency-key": `retry-${summary}` }, raw: body });
    const [first, second] = [await post(), await post()];
    expect(first.status).toBe(202);
    expect(second.body).toEqual(first.body);
    const rows = await byTitle(summary);
    expect(rows).toHaveLength(1);
    expect((await getIncident(ctx.app, ctx.creds.owner, rows[0].id)).timeline.map((e: any) => e.kind)).toEqual(["opened"]);
  });

  it("acknowledge or resolve with nothing open is accepted and records nothing", async () => {
    const before = (await listIncidents(ctx.app, ctx.creds.owner)).length;
    for (const name of ["events-v2-acknowledge.json", "events-v2-resolve.json"]) {
      const dedupKey = unique("nothing open");
      expect(await enqueue(event(name, { dedup_key: dedupKey }))).toMatchObject({
        status: 202,
        body: { status: "success", message: "Event processed", dedup_key: dedupKey },
      });
    }
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before);
  });

  it.each([
    ["critical", "sev1"],
    ["error", "sev2"],
    ["warning", "sev3"],
    ["info", "sev4"],
  ])("severity %s is %s", async (severity, expected) => {
    const summary = unique(`sev ${severity}`);
    await enqueue(event("events-v2-trigger-minimal.json", { payload: { summary, source: "db-02", severity } }));
    expect((await byTitle(summary))[0].severity).toBe(expected);
  });

  it("client_url is the entry's link when no link is http(s); hostile values stay data", async () => {
    const summary = unique("client url");
    await enqueue(
      event("events-v2-trigger-minimal.json", {
        payload: { summary, source: "db-02", severity: "info" },
        client_url: "https://monitor.example.com/checks/9",
        links: [{ href: "ftp://x" }],
      }),
    );
    const [row] = await byTitle(summary);
    expect((await getIncident(ctx.app, ctx.creds.owner, row.id)).timeline[0].link).toBe("https://monitor.example.com/checks/9");

    const hostile = event("hostile-trigger.json");
    const res = await enqueue(undefined, { raw: JSON.stringify(hostile).replace('"routing_key"', '"__proto__":{"polluted":true},"routing_key"') });
    expect(res.status).toBe(202);
    const incident = (await listIncidents(ctx.app, ctx.creds.owner)).find((i) => i.title.startsWith("Summary with a NUL"));
    const full = await getIncident(ctx.app, ctx.creds.owner, incident.id);
    expect(full.title).toContain("\uFFFD");
    expect(full.entity).toEqual({ kind: "service", id: "__proto__" });
    expect(full.timeline[0].link).toBeNull();
    expect(({} as any).polluted).toBeUndefined();
  });

  it.each([
    [
      "no summary, source or severity on a trigger",
      { event_action: "trigger", payload: {} },
      ["'payload.summary' is missing or blank", "'payload.source' is missing or blank", "'payload.severity' is missing or blank"],
    ],
    ["no payload on a trigger", { event_action: "trigger" }, ["'payload' is missing or blank"]],
    ["an unknown action", { event_action: "snooze", dedup_key: "k" }, ["'event_action' must be one of trigger, acknowledge, resolve"]],
    ["no action", { dedup_key: "k" }, ["'event_action' is missing or blank"]],
    [
      "an unknown severity",
      { event_action: "trigger", payload: { summary: "s", source: "h", severity: "fatal" } },
      ["'payload.severity' must be one of critical, error, warning, info"],
    ],
    ["a dedup key over 255 characters", { event_action: "resolve", dedup_key: "k".repeat(256) }, ["'dedup_key' is longer than 255 characters"]],
    [
      "a summary over 1024 characters",
      { event_action: "trigger", payload: { summary: "s".repeat(1025), source: "h", severity: "info" } },
      ["'payload.summary' is longer than 1024 characters"],
    ],
    ["acknowledge without a dedup key", { event_action: "acknowledge" }, ["'dedup_key' is missing or blank"]],
    [
      "links that are not a list",
      { event_action: "trigger", payload: { summary: "s", source: "h", severity: "info" }, links: "x" },
      ["'links' must be an array"],
    ],
  ])("400 invalid event: %s", async (_name, changes, errors) => {
    const before = (await listIncidents(ctx.app, ctx.creds.owner)).length;
    const res = await enqueue({ routing_key: ctx.creds.ingestToken, ...changes });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ ...INVALID, errors });
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before);
  });

  it("400 invalid event: a missing or unknown routing key, malformed JSON, a body over 512 KB", async () => {
    expect((await enqueue(fixture("pagerduty/events-v2-trigger-minimal.json"))).body).toEqual({ ...INVALID, errors: ["Invalid routing key"] });
    const { routing_key: _, ...noKey } = fixture("pagerduty/events-v2-trigger-minimal.json");
    expect(await enqueue(noKey)).toMatchObject({ status: 400, body: { ...INVALID, errors: ["'routing_key' is missing or blank"] } });
    const malformed = await enqueue(undefined, { raw: "{not json" });
    expect(malformed.status).toBe(400);
    expect(malformed.body).toEqual({ ...INVALID, errors: ["Malformed JSON: the body is not valid JSON"] });
    const big = event("events-v2-trigger-minimal.json", {
      payload: { summary: "big", source: "h", severity: "info", custom_details: { blob: "x".repeat(512 * 1024) } },
    });
    const tooBig = await enqueue(big);
    expect(tooBig.status).toBe(400);
    expect(tooBig.body).toEqual({ ...INVALID, errors: ["Event object is larger than 512 KB"] });
    // Just under the limit is accepted.
    const justUnder = event("events-v2-trigger-minimal.json", {
      payload: { summary: unique("under"), source: "h", severity: "info", custom_details: { blob: "x".repeat(500 * 1024) } },
    });
    expect((await enqueue(justUnder)).status).toBe(202);
  });

  it("a maintenance window covering the source: 202, nothing opens", async () => {
    const summary = unique("in maintenance");
    await duringMaintenance(ctx.app, ctx.creds.owner, { sources: ["pagerduty-events"] }, async () => {
      const res = await enqueue(event("events-v2-trigger-minimal.json", { payload: { summary, source: "h", severity: "critical" } }));
      expect(res.status).toBe(202);
    });
    expect(await byTitle(summary)).toHaveLength(0);
  });

  it("a change event is an entry on the open incident of the same source; a retried post is recorded once", async () => {
    const summary = unique("before deploy");
    await enqueue(event("events-v2-trigger-minimal.json", { payload: { summary, source: "h", severity: "error" } }));
    const [row] = await byTitle(summary);
    const change = event("change-event-full.json");
    const res = await enqueue(change, { path: "/v2/change/enqueue" });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ status: "success", message: "Change event processed", dedup_key: null });
    await enqueue(change, { path: "/v2/change/enqueue" });
    const incident = await getIncident(ctx.app, ctx.creds.owner, row.id);
    const changes = incident.timeline.filter((entry: any) => entry.kind === "change");
    expect(changes).toHaveLength(1);
    expect(changes[0]).toMatchObject({
      summary: "Deployed checkout-api v2.14.0 to prod",
      link: "https://ci.example.com/checkout-api/builds/4812",
    });
    // Stamped when it arrived; the change's own time is kept in its data.
    expect(Date.parse(changes[0].at)).toBeGreaterThan(Date.parse("2025-01-01T00:00:00Z"));
    expect(Date.parse(changes[0].data.occurredAt)).toBe(Date.parse("2024-06-12T09:58:03Z"));
    expect(changes[0].data.payload.custom_details).toMatchObject({ build_number: "4812" });
    expect(incident.state).toBe("open");
  });

  it("a change event with no open incident of the source is an audit event; errors are PagerDuty's", async () => {
    const change = { ...fixture("pagerduty/change-event-full.json"), routing_key: ctx.other.ingestToken };
    const res = await enqueue(change, { path: "/v2/change/enqueue" });
    expect(res.status).toBe(202);
    const events = await auditEvents(ctx.app, ctx.other.owner, "trigger.pagerduty_change", undefined, 10_000, ctx.other.slug);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      actor: "trigger",
      data: { summary: "Deployed checkout-api v2.14.0 to prod", link: "https://ci.example.com/checkout-api/builds/4812" },
    });
    const otherIncidents = await ctx.app.call("GET", `/o/${ctx.other.slug}/incidents`, { token: ctx.other.owner });
    expect(otherIncidents.body.incidents).toEqual([]);
    expect((await enqueue({ routing_key: ctx.other.ingestToken, payload: {} }, { path: "/v2/change/enqueue" })).body).toEqual({
      ...INVALID,
      errors: ["'payload.summary' is missing or blank"],
    });
    expect((await enqueue({ routing_key: "nope", payload: { summary: "x" } }, { path: "/v2/change/enqueue" })).body).toEqual({
      ...INVALID,
      errors: ["Invalid routing key"],
    });
  });

  it("deliveries are counted in the shared metrics under their badge", async () => {
    // Counters are per process: in the cluster, the intake replicas hold them.
    const urls = ctx.app.cluster
      ? ctx.app.cluster.processes.filter((p) => p.name.startsWith("intake")).map((p) => `http://127.0.0.1:${p.metricsPort}/metrics`)
      : [ctx.app.process.metricsUrl!];
    const text = (await Promise.all(urls.map(async (url) => (await fetch(url)).text()))).join("\n");
    expect(text).toMatch(/warroom_trigger_deliveries_total\{source="pagerduty-events",outcome="opened"\} \d+/);
    expect(text).toMatch(/warroom_trigger_deliveries_total\{source="pagerduty-events",outcome="refused"\} \d+/);
  });
}

/** PagerDuty Events API v1 (`POST /generic/2010-04-15/create_event.json`), for older senders. */
export function pagerDutyV1Suite(ctx: DropinContext): void {
  const path = "/generic/2010-04-15/create_event.json";
  const createEvent = (body: unknown, raw?: string): Promise<Answer> =>
    callApi(ctx.app.url, "POST", path, { headers: { "content-type": "application/json" }, raw: raw ?? JSON.stringify(body) });
  const event = (name: string, changes: Record<string, unknown> = {}) => ({ ...fixture(`pagerduty/${name}`), service_key: ctx.creds.ingestToken, ...changes });
  const processed = (incidentKey: string) => ({ status: 200, body: { status: "success", message: "Event processed", incident_key: incidentKey } });

  it("trigger opens an incident: 200 in PagerDuty's v1 shape with the incident key; acknowledge and resolve are entries", async () => {
    const incidentKey = unique("srv01/HTTP");
    const trigger = event("events-v1-trigger.json", { incident_key: incidentKey });
    expect(await createEvent(trigger)).toMatchObject(processed(incidentKey));
    const [row] = (await listIncidents(ctx.app, ctx.creds.owner)).filter((incident) => incident.title === trigger.description);
    const incident = await getIncident(ctx.app, ctx.creds.owner, row.id);
    // v1 has no severity: PagerDuty's alerts from it are errors.
    expect(incident).toMatchObject({ title: trigger.description, severity: "sev2", state: "open", source: "pagerduty-events" });
    const [opened] = incident.timeline;
    expect(opened).toMatchObject({
      kind: "opened",
      summary: trigger.description,
      link: "https://monitoring.example.com/incidents/srv01-http",
      alertRef: incidentKey,
    });
    expect(opened.data).toMatchObject({
      eventAction: "trigger",
      dedupKey: incidentKey,
      client: "Sample Monitoring Service",
      clientUrl: "https://monitoring.example.com/checks/srv01-http",
      payload: { custom_details: { "ping time": "1500ms", "load avg": 0.75 } },
      links: [{ href: "https://monitoring.example.com/incidents/srv01-http" }, { href: "https://wiki.example.com/runbooks/http", text: "Runbook" }],
      images: [{ src: "https://charts.example.com/srv01-http.png", alt: "Response time, last hour" }],
    });
    expect(JSON.stringify(opened.data)).not.toContain(ctx.creds.ingestToken);

    expect(await createEvent(event("events-v1-acknowledge.json", { incident_key: incidentKey }))).toMatchObject(processed(incidentKey));
    expect(await createEvent(event("events-v1-resolve.json", { incident_key: incidentKey }))).toMatchObject(processed(incidentKey));
    const after = await getIncident(ctx.app, ctx.creds.owner, row.id);
    expect(after.timeline.map((entry: { kind: string }) => entry.kind)).toEqual(["opened", "acknowledged", "recovery"]);
    // A recovery never resolves (the spec); the incident stays open.
    expect(after.state).toBe("open");
  });

  it("v1 and v2 name one alert by the same key: a v2 resolve finds the incident a v1 trigger opened", async () => {
    const incidentKey = unique("shared key");
    const description = unique("v1 then v2");
    expect(await createEvent(event("events-v1-trigger.json", { incident_key: incidentKey, description }))).toMatchObject(processed(incidentKey));
    const resolve = { ...fixture("pagerduty/events-v2-resolve.json"), routing_key: ctx.creds.ingestToken, dedup_key: incidentKey };
    expect((await callApi(ctx.app.url, "POST", "/v2/enqueue", { body: resolve })).status).toBe(202);
    const [row] = (await listIncidents(ctx.app, ctx.creds.owner)).filter((incident) => incident.title === description);
    const incident = await getIncident(ctx.app, ctx.creds.owner, row.id);
    expect(incident.timeline.map((entry: { kind: string }) => entry.kind)).toEqual(["opened", "recovery"]);
  });

  it("a trigger without incident_key gets one generated and returned", async () => {
    const description = unique("no key");
    const { incident_key: _, ...noKey } = event("events-v1-trigger.json", { description });
    const answer = await createEvent(noKey);
    expect(answer.status).toBe(200);
    expect(answer.body.incident_key).toMatch(/\S{16,}/);
    expect(await createEvent(event("events-v1-resolve.json", { incident_key: answer.body.incident_key }))).toMatchObject(processed(answer.body.incident_key));
    const [row] = (await listIncidents(ctx.app, ctx.creds.owner)).filter((incident) => incident.title === description);
    expect((await getIncident(ctx.app, ctx.creds.owner, row.id)).timeline).toHaveLength(2);
  });

  it("400 invalid event with v1's field names; nothing is recorded", async () => {
    const before = (await listIncidents(ctx.app, ctx.creds.owner)).length;
    const refused = (errors: string[]) => ({ status: 400, body: { ...INVALID, errors } });
    const { service_key: _, ...noKey } = event("events-v1-trigger.json");
    expect(await createEvent(noKey)).toMatchObject(refused(["'service_key' is missing or blank"]));
    expect(await createEvent({ ...noKey, service_key: "not-a-token" })).toMatchObject(refused(["Invalid service key"]));
    expect(await createEvent(event("events-v1-trigger.json", { description: " " }))).toMatchObject(refused(["'description' is missing or blank"]));
    expect(await createEvent(event("events-v1-trigger.json", { description: "x".repeat(1025) }))).toMatchObject(
      refused(["'description' is longer than 1024 characters"]),
    );
    expect(await createEvent(event("events-v1-trigger.json", { event_type: "escalate" }))).toMatchObject(
      refused(["'event_type' must be one of trigger, acknowledge, resolve"]),
    );
    const { incident_key: __, ...resolveWithoutKey } = event("events-v1-resolve.json");
    expect(await createEvent(resolveWithoutKey)).toMatchObject(refused(["'incident_key' is missing or blank"]));
    expect(await createEvent(event("events-v1-trigger.json", { contexts: "a link" }))).toMatchObject(refused(["'contexts' must be an array"]));
    expect((await createEvent(undefined, "{not json")).status).toBe(400);
    expect(await listIncidents(ctx.app, ctx.creds.owner)).toHaveLength(before);
  });
}
