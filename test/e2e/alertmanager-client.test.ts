import { createServer, type Server } from "node:http";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAlertmanager, type PostableAlert, type RunningAlertmanager } from "../support/alertmanager.js";
import { callApi } from "../support/app.js";
import { fixture, getIncident, issueCredentials, listIncidents, startIntakeApp, type Credentials, type IntakeApp } from "./triggers-kit.js";

/**
 * A real client end to end: Debian's Alertmanager (0.25) posts straight to the service through
 * its own `pagerduty_configs`, `opsgenie_configs` and `webhook_configs` (the last with
 * `http_config.authorization`, since 0.25 cannot set custom headers). Alerts enter through
 * Alertmanager's `/api/v2/alerts`. For each receiver: firing opens one incident, a second alert
 * of the group attaches, resolving the group records a recovery and the incident stays open.
 *
 * Each receiver also sends a copy to a recorder here, so the test sees exactly what this
 * Alertmanager sends; `UPDATE_FIXTURES=1` saves those bodies as fixtures (keys scrubbed).
 */

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

interface Recorded {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: any;
}

function startRecorder(): Promise<{ server: Server; port: number; recorded: Recorded[] }> {
  const recorded: Recorded[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      recorded.push({ path: req.url ?? "", headers: req.headers, body: text ? JSON.parse(text) : null });
      res.writeHead(202, { "content-type": "application/json" });
      res.end(JSON.stringify({ status: "success", message: "Event processed", result: "Request will be processed", took: 0, requestId: "recorded" }));
    });
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => resolve({ server, port: (server.address() as { port: number }).port, recorded }));
  });
}

function config(serviceUrl: string, recorderUrl: string, creds: Credentials): string {
  // JSON is YAML: no hand-written indentation to get wrong.
  return JSON.stringify({
    // Alerts posted without endsAt resolve on their own after resolve_timeout; the test resolves
    // them explicitly (endsAt), so this only has to outlast a slow step on a loaded machine.
    global: { resolve_timeout: "60s" },
    route: {
      receiver: "nowhere",
      group_by: ["alertname"],
      group_wait: "1s",
      group_interval: "2s",
      repeat_interval: "1h",
      routes: [
        { matchers: ['via="pagerduty"'], receiver: "pagerduty" },
        { matchers: ['via="opsgenie"'], receiver: "opsgenie" },
        { matchers: ['via="webhook"'], receiver: "webhook" },
      ],
    },
    receivers: [
      { name: "nowhere" },
      {
        name: "pagerduty",
        pagerduty_configs: [
          { routing_key: creds.ingestToken, url: `${serviceUrl}/v2/enqueue`, send_resolved: true },
          { routing_key: creds.ingestToken, url: `${recorderUrl}/v2/enqueue`, send_resolved: true },
        ],
      },
      {
        name: "opsgenie",
        opsgenie_configs: [
          { api_key: creds.ingestToken, api_url: `${serviceUrl}/`, send_resolved: true, priority: "P2", tags: "service:checkout-api,prod" },
          { api_key: creds.ingestToken, api_url: `${recorderUrl}/`, send_resolved: true, priority: "P2", tags: "service:checkout-api,prod" },
        ],
      },
      {
        name: "webhook",
        webhook_configs: [
          { url: `${serviceUrl}/triggers/alertrouter`, send_resolved: true, http_config: { authorization: { credentials: creds.alertRouterSecret } } },
          { url: `${recorderUrl}/triggers/alertrouter`, send_resolved: true },
        ],
      },
    ],
  });
}

describe("a real Alertmanager posts straight to the service", () => {
  let app: IntakeApp;
  let creds: Credentials;
  let alertmanager: RunningAlertmanager;
  let recorder: Awaited<ReturnType<typeof startRecorder>>;

  beforeAll(async () => {
    app = await startIntakeApp("one process");
    creds = await issueCredentials(app);
    recorder = await startRecorder();
    alertmanager = await startAlertmanager(config(app.url, `http://127.0.0.1:${recorder.port}`, creds));
  }, 120_000);

  afterAll(async () => {
    await alertmanager?.stop();
    await new Promise((resolve) => recorder?.server.close(resolve));
    await app?.stop();
  });

  function alert(via: string, instance: string, endsAt?: Date): PostableAlert {
    return {
      labels: { alertname: `CheckoutErrors-${via}`, via, severity: "critical", service: "checkout-api", instance },
      annotations: { summary: `5xx ratio above 5% on ${instance}` },
      startsAt: new Date(Date.now() - 60_000).toISOString(),
      ...(endsAt ? { endsAt: endsAt.toISOString() } : {}),
      generatorURL: "http://prometheus.example.test/graph?g0.expr=rate",
    };
  }

  async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 45_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await probe();
      if (value !== undefined) return value;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${alertmanager.output.join("").slice(-4000)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  async function lifecycle(via: string, source: string, recoveryKind = "recovery") {
    await alertmanager.postAlerts([alert(via, "pod-a")]);
    const opened = await waitFor(`the ${source} incident`, async () => (await listIncidents(app, creds.owner)).find((i) => i.source === source));
    await alertmanager.postAlerts([alert(via, "pod-a"), alert(via, "pod-b")]);
    await waitFor(`a repeat on the ${source} incident`, async () => {
      const incident = await getIncident(app, creds.owner, opened.id);
      return incident.timeline.some((entry: any) => entry.kind === "repeat") ? incident : undefined;
    });
    const now = new Date();
    await alertmanager.postAlerts([alert(via, "pod-a", now), alert(via, "pod-b", now)]);
    const recovered = await waitFor(`a recovery on the ${source} incident`, async () => {
      const incident = await getIncident(app, creds.owner, opened.id);
      return incident.timeline.some((entry: any) => entry.kind === recoveryKind) ? incident : undefined;
    });
    expect(recovered.state).toBe("open");
    expect((await listIncidents(app, creds.owner)).filter((i) => i.source === source)).toHaveLength(1);
    return recovered;
  }

  it("pagerduty_configs: trigger opens, the next trigger of the group attaches, resolve records a recovery", async () => {
    const incident = await lifecycle("pagerduty", "pagerduty-events");
    expect(incident.title).toMatch(/^\[FIRING:1\] CheckoutErrors-pagerduty/);
    expect(incident.timeline.map((entry: any) => entry.kind)).toEqual(["opened", "repeat", "recovery"]);
    const sent = recorder.recorded.filter((r) => r.path === "/v2/enqueue").map((r) => r.body);
    expect(sent.map((body) => body.event_action)).toEqual(["trigger", "trigger", "resolve"]);
    expect(new Set(sent.map((body) => body.dedup_key)).size).toBe(1);
    expect(incident.timeline[0].alertRef).toBe(sent[0].dedup_key);
  });

  it("opsgenie_configs: create opens, the next create of the group attaches, close records a recovery", async () => {
    const incident = await lifecycle("opsgenie", "opsgenie");
    expect(incident).toMatchObject({ severity: "sev2", entity: { kind: "service", id: "checkout-api" } });
    const sent = recorder.recorded.filter((r) => r.path.startsWith("/v2/alerts"));
    expect(sent.map((r) => r.path.replace(/\/v2\/alerts\/[0-9a-f]+\//, "/v2/alerts/{alias}/"))).toEqual([
      "/v2/alerts",
      "/v2/alerts",
      "/v2/alerts/{alias}/close?identifierType=alias",
    ]);
    expect(sent[0]!.headers.authorization).toBe(`GenieKey ${creds.ingestToken}`);
    expect(incident.timeline[0].alertRef).toBe(sent[0]!.body.alias);
  });

  it("webhook_configs with http_config.authorization (Bearer): firing opens, attaches, resolved records a recovery", async () => {
    const incident = await lifecycle("webhook", "alert-router");
    expect(incident).toMatchObject({ title: "CheckoutErrors-webhook", severity: "sev1", entity: { kind: "service", id: "checkout-api" } });
    // The same uniform 401 for a wrong secret in either place.
    const body = fixture("alertmanager/webhook-v4-firing.json");
    const wrong: Record<string, string>[] = [{ authorization: `Bearer ${"f".repeat(64)}` }, { "x-service-alertrouter-secret": "f".repeat(64) }, {}];
    for (const headers of wrong) {
      const res = await callApi(app.url, "POST", "/triggers/alertrouter", {
        headers: { "content-type": "application/json", ...headers },
        raw: JSON.stringify(body),
      });
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: "unauthorized" });
    }
  });

  it("what Alertmanager 0.25 sends is what the saved fixtures hold", () => {
    const scrub = (value: unknown) => JSON.parse(JSON.stringify(value).replaceAll(creds.ingestToken, "<ingest token>"));
    const pagerDuty = recorder.recorded.filter((r) => r.path === "/v2/enqueue").map((r) => scrub(r.body));
    const opsgenie = recorder.recorded.filter((r) => r.path.startsWith("/v2/alerts")).map((r) => ({ path: r.path, body: scrub(r.body) }));
    const captured: Record<string, unknown> = {
      "pagerduty/alertmanager-0.25-trigger.json": pagerDuty.find((b) => b.event_action === "trigger"),
      "pagerduty/alertmanager-0.25-resolve.json": pagerDuty.find((b) => b.event_action === "resolve"),
      "opsgenie/alertmanager-0.25-create.json": opsgenie.find((r) => r.path === "/v2/alerts")?.body,
      "opsgenie/alertmanager-0.25-close.json": opsgenie.find((r) => r.path.endsWith("/close?identifierType=alias"))?.body,
    };
    for (const [path, body] of Object.entries(captured)) {
      expect(body, path).toBeDefined();
      if (process.env.UPDATE_FIXTURES === "1") writeFileSync(join(repoRoot, "test", "fixtures", path), `${JSON.stringify(body, null, 2)}\n`);
      // Values change per run (times, keys); the shape must not.
      expect(shapeOf(body), path).toEqual(shapeOf(fixture(path)));
    }
  });
});

/** Every key path with its JSON type, so two bodies of one sender compare by shape. */
function shapeOf(value: unknown, path = ""): string[] {
  if (Array.isArray(value)) return [`${path}:array`, ...(value.length > 0 ? shapeOf(value[0], `${path}[]`) : [])];
  if (value !== null && typeof value === "object") {
    return [
      `${path}:object`,
      ...Object.keys(value)
        .sort()
        .flatMap((key) => shapeOf((value as Record<string, unknown>)[key], `${path}.${key}`)),
    ];
  }
  return [`${path}:${value === null ? "null" : typeof value}`];
}
