import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getIncident, issueCredentials, MODES, postTrigger, startIntakeApp, unique, type Credentials, type IntakeApp } from "./triggers-kit.js";

/**
 * Many deliveries at once, as a busy sender makes them: 200 concurrent posts over 20 alerts, each
 * alert's first trigger and repeats plus retries of some of its notifications. The incident core
 * decides deliveries that arrive together in groups (group commit); exactly once must hold
 * whatever the grouping: one incident per alert, every other post attached to it, and each event
 * identifier recorded once on its timeline. Over NATS intake also sends the deliveries that
 * arrive together to the incident core in groups (one RecordMany each), and the same must hold.
 */

const ALERTS = 20;
const EVENTS_PER_ALERT = 8;
const RETRIES_PER_ALERT = 2;

describe.each(MODES)("concurrent deliveries (%s)", (mode) => {
  let app: IntakeApp;
  let creds: Credentials;

  beforeAll(async () => {
    app = await startIntakeApp(mode);
    creds = await issueCredentials(app);
  }, 120_000);

  afterAll(async () => {
    await app?.stop();
  });

  it("opens one incident per alert, attaches every other post and records each event once", async () => {
    const run = unique("burst");
    const body = (alert: number, event: number) => ({
      title: `[${event === 0 ? "Triggered" : "Re-Triggered"} on {host:web-${alert}}] High CPU on web hosts`,
      body: "CPU above 90% for 5 minutes",
      alert_id: `${run}-a${alert}`,
      alert_transition: event === 0 ? "Triggered" : "Re-Triggered",
      alert_type: "error",
      alert_priority: "P2",
      event_id: `${run}-a${alert}-e${event}`,
      tags: ["env:prod", "service:checkout"],
      link: "https://monitor.example.com/event/jump_to?event_id=1",
    });
    const posts: { alert: number; event: number }[] = [];
    for (let alert = 0; alert < ALERTS; alert++) {
      for (let event = 0; event < EVENTS_PER_ALERT; event++) posts.push({ alert, event });
      // Retries of two of the alert's notifications, sent at the same time as the first.
      for (let retry = 0; retry < RETRIES_PER_ALERT; retry++) posts.push({ alert, event: retry * 3 + 1 });
    }
    const answers = await Promise.all(posts.map(({ alert, event }) => postTrigger(app, creds.ingestToken, body(alert, event))));

    const failed = answers.filter((a) => a.status !== 200 && a.status !== 201);
    expect(failed.map((a) => `${a.status} ${JSON.stringify(a.body)}`)).toEqual([]);
    const outcomes = answers.map((a) => a.body.outcome as string);
    expect(outcomes.filter((o) => o === "opened")).toHaveLength(ALERTS);
    expect(outcomes.filter((o) => o === "attached")).toHaveLength(posts.length - ALERTS);

    const incidentOf = new Map<number, Set<string>>();
    for (const [k, { alert }] of posts.entries()) {
      const ids = incidentOf.get(alert) ?? new Set<string>();
      ids.add(answers[k]!.body.incidentId);
      incidentOf.set(alert, ids);
    }
    for (const [alert, ids] of incidentOf) {
      expect(ids.size, `alert ${alert}: one incident for all its posts`).toBe(1);
      const incident = await getIncident(app, creds.owner, [...ids][0]!);
      const events = incident.timeline.map((entry: any) => entry.eventId as string);
      expect(events.toSorted(), `alert ${alert}: each event recorded once`).toEqual(
        Array.from({ length: EVENTS_PER_ALERT }, (_, event) => `${run}-a${alert}-e${event}`).toSorted(),
      );
      expect(incident.timeline.filter((entry: any) => entry.kind === "opened")).toHaveLength(1);
    }

    if (app.cluster) {
      // Every delivery went through a call to the incident core, and some calls carried several.
      const intakes = app.cluster.processes.filter((p) => p.name.startsWith("intake"));
      const metrics = (await Promise.all(intakes.map(async (p) => (await fetch(`http://127.0.0.1:${p.metricsPort}/metrics`)).text()))).join("\n");
      const total = (name: string) => [...metrics.matchAll(new RegExp(`^${name} (\\d+)$`, "gm"))].reduce((sum, m) => sum + Number(m[1]), 0);
      const calls = total("warroom_intake_record_call_deliveries_count");
      const carried = total("warroom_intake_record_call_deliveries_sum");
      // A retry recognized while its first delivery is in flight waits for that answer instead.
      expect(carried).toBeGreaterThanOrEqual(ALERTS * EVENTS_PER_ALERT);
      expect(carried).toBeLessThanOrEqual(posts.length);
      expect(calls, `${carried} deliveries in ${calls} calls`).toBeLessThan(carried);
    }
  }, 120_000);
});
