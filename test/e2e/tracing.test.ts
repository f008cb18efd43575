import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { makeTestCertificates, startChatWebhookReceiver, type ChatWebhookReceiver, type TestCertificates } from "../support/https-receiver.js";
import { startClusterApp } from "../support/cluster.js";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../support/otlp-receiver.js";

// One POST /triggers across separate processes over NATS, exported over OTLP/HTTP (protobuf) to a
// receiver of the test's own: one trace from the caller's traceparent through the gateway,
// intake, identity and incidents, the outbox wait and publish, to the consumer that writes the
// audit row, each span the child of the one that caused it.

const datadog = JSON.parse(readFileSync("test/fixtures/datadog/custom-body-triggered.json", "utf8"));
const SERVER = 2;
const CLIENT = 3;
const PRODUCER = 4;
const CONSUMER = 5;

describe("a trace across every hop of a delivery", () => {
  let receiver: OtlpReceiver;
  let app: Awaited<ReturnType<typeof startClusterApp>>;
  let certs: TestCertificates;
  let chat: ChatWebhookReceiver;
  let windowId: string;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    // A chat webhook on loopback, reached over https through the egress client.
    certs = makeTestCertificates();
    chat = await startChatWebhookReceiver(certs);
    app = await startClusterApp({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_BSP_SCHEDULE_DELAY: "100",
        LOG_LEVEL: "debug",
        SECRETS_KEYS: newSecretKeyEntry("k-trace"),
        EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
        EGRESS_CA_FILE: certs.caFile,
      },
      output: "capture",
      intakes: 1,
    });
  }, 120_000);

  afterAll(async () => {
    await app?.stop();
    await receiver?.close();
    await chat?.close();
    certs?.remove();
  });

  it("runs from the gateway to the audit consumer under one trace id, with correct parents", async () => {
    const owner = await app.ownerToken();
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
    const minutes = (n: number) => new Date(Date.now() + n * 60_000).toISOString();
    const window = await app.call("POST", "/o/acme/maintenance-windows", {
      token: owner,
      body: { startsAt: minutes(-1), endsAt: minutes(30), reason: "traced upgrade" },
    });
    expect(window.status).toBe(201);
    windowId = window.body.id;

    const traceId = randomBytes(16).toString("hex");
    const callerSpan = randomBytes(8).toString("hex");
    const title = `traced-${randomBytes(4).toString("hex")}`;
    const res = await app.call("POST", "/triggers", {
      token: ingest,
      body: { ...datadog, alert_id: "traced-1", title },
      headers: { traceparent: `00-${traceId}-${callerSpan}-01` },
    });
    expect(res.status).toBe(200);
    expect(res.body.outcome).toBe("suppressed");
    // The gateway answers with the trace it continued, naming its own span.
    const answered = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(res.headers.get("traceparent") ?? "");
    expect(answered?.[1]).toBe(traceId);

    const ofTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
    const find = (predicate: (s: ReceivedSpan) => boolean) => ofTrace().filter(predicate);
    const deadline = Date.now() + 30_000;
    // Each process exports on its own schedule: the gateway's route span, which ends with the
    // answer, can come after the audit consumer's last span.
    while (Date.now() < deadline) {
      const consumed = find((s) => s.kind === CONSUMER && s.name === "consume events.audit.recorded");
      const routed = find((s) => s.kind === SERVER && s.name === "POST /triggers").length > 0;
      if (routed && consumed.length > 0 && find((s) => s.parentSpanId === consumed[0]!.spanId && s.name === "INSERT").length > 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(receiver.errors).toEqual([]);
    const spans = ofTrace();
    const one = (what: string, predicate: (s: ReceivedSpan) => boolean): ReceivedSpan => {
      const found = spans.filter(predicate);
      expect(
        found.map((s) => `${s.service}: ${s.name}`),
        `${what} among ${spans.map((s) => `${s.service}: ${s.name}`).join(", ")}`,
      ).toHaveLength(1);
      return found[0]!;
    };
    const parentOf = (span: ReceivedSpan) => spans.find((s) => s.spanId === span.parentSpanId);

    // Gateway: the route's span, child of the caller's span; the answer names it.
    const route = one("the route span", (s) => s.kind === SERVER && s.name === "POST /triggers");
    expect(route.service).toBe("gateway");
    expect(route.parentSpanId).toBe(callerSpan);
    expect(answered?.[2]).toBe(route.spanId);
    expect(route.attributes["http.route"]).toBe("/triggers");
    expect(route.attributes["http.response.status_code"]).toBe(200n);

    // Gateway -> intake over NATS.
    const deliverCall = one("the gateway's call to intake", (s) => s.kind === CLIENT && s.name === "warroom.intake.v1.IntakeService/Deliver");
    expect(deliverCall.parentSpanId).toBe(route.spanId);
    const deliver = one("intake serving the delivery", (s) => s.kind === SERVER && s.name === "warroom.intake.v1.IntakeService/Deliver");
    expect(deliver.service).toBe("intake");
    expect(deliver.parentSpanId).toBe(deliverCall.spanId);
    expect(deliver.attributes).toMatchObject({ "warroom.outcome": "suppressed", "warroom.source": "metrics-monitor" });
    expect(deliver.attributes["warroom.org_id"]).toMatch(/^[0-9a-f-]{36}$/);

    // Intake -> identity (the ingest token; a cache miss on a fresh token) and -> incidents.
    const resolveCall = one("intake resolving the token", (s) => s.kind === CLIENT && s.name === "warroom.identity.v1.IdentityService/ResolveIngestToken");
    expect(resolveCall.parentSpanId).toBe(deliver.spanId);
    const resolved = one("identity resolving the token", (s) => s.kind === SERVER && s.name === "warroom.identity.v1.IdentityService/ResolveIngestToken");
    expect(resolved.service).toBe("identity");
    expect(resolved.parentSpanId).toBe(resolveCall.spanId);
    expect(spans.some((s) => s.service === "identity" && s.name === "SELECT" && s.parentSpanId === resolved.spanId)).toBe(true);

    const recordCall = one("intake calling the incident core", (s) => s.kind === CLIENT && s.name === "warroom.incidents.v1.IncidentsService/Record");
    expect(recordCall.parentSpanId).toBe(deliver.spanId);
    const record = one("the incident core recording", (s) => s.kind === SERVER && s.name === "warroom.incidents.v1.IncidentsService/Record");
    expect(record.service).toBe("incidents");
    expect(record.parentSpanId).toBe(recordCall.spanId);

    // Incidents: its SQL statements, each a span under the call, named by operation, no parameters.
    const statements = spans.filter((s) => s.service === "incidents" && s.parentSpanId === record.spanId && s.attributes["db.system.name"] === "postgresql");
    // The one statement of the delivery (it finds the window), then the audit row in the outbox;
    // the relay's own statements belong to no request.
    expect(statements.map((s) => s.name)).toEqual(["WITH", "INSERT"]);
    for (const s of statements) expect(s.endNanos).toBeGreaterThanOrEqual(s.startNanos);
    const auditInsert = statements.find((s) => String(s.attributes["db.query.text"]).startsWith("insert into incidents.outbox"));
    expect(auditInsert?.attributes["db.query.text"]).toMatch(/values \(\$1, \$2, \$3::text\)/);

    // The outbox: the wait and the publish continue the trace of the call that wrote the row.
    const wait = one("the outbox wait", (s) => s.name === "outbox wait events.audit.recorded");
    expect(wait.service).toBe("incidents");
    expect(wait.parentSpanId).toBe(record.spanId);
    expect(wait.startNanos).toBeLessThanOrEqual(wait.endNanos);
    const publish = one("the publish", (s) => s.kind === PRODUCER && s.name === "publish events.audit.recorded");
    expect(publish.service).toBe("incidents");
    expect(publish.parentSpanId).toBe(record.spanId);
    expect(publish.attributes["messaging.destination.name"]).toBe("events.audit.recorded");

    // JetStream -> the identity service's audit consumer, and the row it writes.
    const consume = one("the audit consumer", (s) => s.kind === CONSUMER && s.name === "consume events.audit.recorded");
    expect(consume.service).toBe("identity");
    expect(consume.parentSpanId).toBe(publish.spanId);
    expect(consume.attributes["messaging.consumer.group.name"]).toBe("identity-audit");
    const written = spans.filter((s) => s.parentSpanId === consume.spanId && s.name === "INSERT");
    expect(written.map((s) => s.attributes["db.query.text"])).toEqual([expect.stringMatching(/^insert into identity\.audit_events/)]);

    // One trace: every span of it leads back to the caller's span.
    for (const span of spans) {
      let at: ReceivedSpan | undefined = span;
      for (let hops = 0; at && at.parentSpanId !== callerSpan && hops < 50; hops++) at = parentOf(at);
      expect(at?.parentSpanId, `${span.service}: ${span.name} leads to the caller`).toBe(callerSpan);
    }
    expect(new Set(spans.map((s) => s.service))).toEqual(new Set(["gateway", "intake", "identity", "incidents"]));

    // No credential or payload in any attribute.
    const everything = JSON.stringify(spans, (_k, v) => (typeof v === "bigint" ? String(v) : v));
    expect(everything).not.toContain(ingest);
    expect(everything).not.toContain(owner);
    expect(everything).not.toContain(title);

    // Log lines written inside those spans name them.
    const lines = app.cluster.processes
      .filter((p) => p.name === "intake")
      .flatMap((p) => p.output)
      .filter((line) => line.includes(traceId))
      .map((line) => JSON.parse(line) as { trace_id?: string; span_id?: string; requestId?: string; method?: string });
    const served = lines.find((l) => l.method === "warroom.intake.v1.IntakeService/Deliver");
    expect(served).toMatchObject({ trace_id: traceId, span_id: deliver.spanId });
    expect(served?.requestId).toBe(res.headers.get("x-request-id"));
  }, 120_000);

  it("sends the trace on to the chat webhook, from a client span that never names the URL", async () => {
    const owner = await app.ownerToken();
    if (windowId) expect((await app.call("DELETE", `/o/acme/maintenance-windows/${windowId}`, { token: owner })).status).toBe(204);
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
    const opened = await app.call("POST", "/triggers", { token: ingest, body: { ...datadog, alert_id: `chat-${randomBytes(4).toString("hex")}` } });
    expect(opened.status).toBe(201);
    const incidentId = opened.body.incidentId as string;
    const secret = randomBytes(16).toString("hex");
    expect(
      (await app.call("PUT", "/o/acme/integrations/chatwebhook/connections/default", { token: owner, body: { webhookUrl: chat.url("ok", secret) } })).status,
    ).toBe(200);
    expect((await app.call("PUT", "/o/acme/oncall/egress", { token: owner, body: { enabled: true } })).status).toBe(200);
    const messages = `/o/acme/incidents/${incidentId}/comms/messages`;
    const drafted = await app.call("POST", messages, { token: owner, body: { channel: "chatwebhook", body: "Mitigated; watching error rates." } });
    expect(drafted.status).toBe(201);
    expect((await app.call("POST", `${messages}/${drafted.body.messageId}/approve`, { token: owner, body: { version: drafted.body.version } })).status).toBe(
      200,
    );

    const traceId = randomBytes(16).toString("hex");
    const sent = await app.call("POST", `${messages}/${drafted.body.messageId}/send`, {
      token: owner,
      headers: { traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01` },
    });
    expect(sent.status, JSON.stringify(sent.body)).toBe(200);
    const post = chat.posts.find((p) => p.path.includes(secret));
    const outbound = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(post?.headers.traceparent ?? ""));
    expect(outbound?.[1]).toBe(traceId);

    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    const call = () => receiver.spans.find((s) => s.traceId === traceId && s.name === "POST chat-webhook");
    while (!call() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(call()).toMatchObject({
      service: "comms",
      kind: CLIENT,
      spanId: outbound?.[2],
      attributes: { "warroom.result": "ok", "http.response.status_code": 202n },
    });
    const everything = JSON.stringify(receiver.spans, (_k, v) => (typeof v === "bigint" ? String(v) : v));
    expect(everything).not.toContain(secret);
  });

  it("keeps each delivery's own trace when intake sends deliveries to the incident core in a group", async () => {
    const owner = await app.ownerToken();
    const ingest = (await app.call("POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token as string;
    const run = randomBytes(4).toString("hex");
    // Enough at once that the calls in flight are busy and the rest go together (RecordMany).
    const traces = Array.from({ length: 60 }, () => ({ traceId: randomBytes(16).toString("hex"), spanId: randomBytes(8).toString("hex") }));
    const answers = await Promise.all(
      traces.map((t, n) =>
        app.call("POST", "/triggers", {
          token: ingest,
          body: { ...datadog, alert_id: `grouped-${run}-${n}`, title: `grouped ${run} ${n}` },
          headers: { traceparent: `00-${t.traceId}-${t.spanId}-01` },
        }),
      ),
    );
    expect(answers.map((a) => a.status).filter((s) => s !== 200 && s !== 201)).toEqual([]);
    const ours = new Set(traces.map((t) => t.traceId));
    const groups = () => receiver.spans.filter((s) => s.name === "intake.record_group" && s.links.some((l) => ours.has(l.traceId)));
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    while (groups().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const group = groups()[0];
    expect(group, "a group span linking to the deliveries it carried").toBeDefined();
    expect(group!.service).toBe("intake");
    const linked = group!.links.map((l) => l.traceId);
    expect(linked).toHaveLength(Number(group!.attributes["warroom.record.group_size"]));
    // The incident core's RecordMany links to them too, under the group's trace.
    const served = () =>
      receiver.spans.filter((s) => s.kind === SERVER && s.name === "warroom.incidents.v1.IncidentsService/RecordMany" && s.traceId === group!.traceId);
    while (served().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(
      served()[0]
        ?.links.map((l) => l.traceId)
        .toSorted(),
    ).toEqual(linked.toSorted());
    // What each member caused (its events) continues the member's own trace, not the group's.
    const published = (traceId: string) => receiver.spans.some((s) => s.traceId === traceId && s.kind === PRODUCER && s.service === "incidents");
    while (!linked.every(published) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(linked.filter((t) => !published(t))).toEqual([]);
  });

  it("continues a caller's trace on the public Connect surface too, and answers traceparent", async () => {
    const owner = await app.ownerToken();
    const traceId = randomBytes(16).toString("hex");
    const res = await app.call("POST", "/warroom.incidents.v1.IncidentsService/ListIncidents", {
      token: owner,
      body: { org: "acme" },
      headers: { "connect-protocol-version": "1", traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("traceparent")).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    const served = () => receiver.spans.filter((s) => s.traceId === traceId && s.kind === SERVER && s.service === "incidents");
    while (served().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(served().map((s) => s.name)).toEqual(["warroom.incidents.v1.IncidentsService/ListIncidents"]);
  });
});
