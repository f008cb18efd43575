import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { callApi } from "../support/app.js";
import type { DropinContext } from "./dropin-pagerduty.js";
import { breakTheIncidentCore, type FailureContext } from "./receivers-failures.js";
import { fixture, listIncidents, unique, type Answer } from "./triggers-kit.js";

/**
 * A failure of the incident core while a PagerDuty or Opsgenie sender posts: 503 in the vendor's
 * shape (both vendors' senders retry 5xx), and the retry opens the incident exactly once.
 */
export function dropinFailureSuite(ctx: DropinContext): void {
  let db: postgres.Sql;

  beforeAll(() => {
    db = postgres(ctx.app.databaseUrl, { max: 1, onnotice: () => {} });
  });

  afterAll(async () => {
    await db?.end();
  });

  it("503 in each vendor's shape; the retries open once and then attach", async () => {
    const summary = unique("pd during failure");
    const message = unique("og during failure");
    const pd = () =>
      callApi(ctx.app.url, "POST", "/v2/enqueue", {
        headers: { "content-type": "application/json" },
        raw: JSON.stringify({
          ...fixture("pagerduty/events-v2-trigger-minimal.json"),
          routing_key: ctx.creds.ingestToken,
          dedup_key: summary,
          payload: { summary, source: "h", severity: "critical" },
        }),
      });
    const og = () =>
      callApi(ctx.app.url, "POST", "/v2/alerts", {
        headers: { "content-type": "application/json", authorization: `GenieKey ${ctx.creds.ingestToken}` },
        raw: JSON.stringify({ message, alias: message }),
      });
    const restore = await breakTheIncidentCore(ctx as unknown as FailureContext, db);
    let failed: Answer[];
    try {
      failed = [await pd(), await og()];
    } finally {
      await restore();
    }
    expect(failed[0]).toMatchObject({ status: 503, body: { status: "unavailable", message: "Event could not be processed; retry" } });
    expect(failed[1]).toMatchObject({
      status: 503,
      body: { message: "Service is temporarily unavailable; retry", took: expect.any(Number), requestId: expect.any(String) },
    });
    // Retryable, and each says when.
    for (const res of failed) expect(res.headers.get("retry-after")).toBe("2");

    // The Opsgenie request that failed was stored as processing before the core was called, and
    // never finished: its status reads as Opsgenie's "not processed yet", never as a success.
    const [stuck] = await db<{ request_id: string }[]>`select request_id from intake.opsgenie_requests where alias = ${message} and state = 'processing'`;
    const stuckStatus = await callApi(ctx.app.url, "GET", `/v2/alerts/requests/${stuck!.request_id}`, {
      headers: { authorization: `GenieKey ${ctx.creds.ingestToken}` },
    });
    expect(stuckStatus).toMatchObject({ status: 404, body: { message: "Request not found. It might not be processed, yet." } });

    expect((await pd()).status).toBe(202);
    expect((await pd()).status).toBe(202);
    expect((await og()).status).toBe(202);
    expect((await og()).status).toBe(202);
    const incidents = await listIncidents(ctx.app, ctx.creds.owner);
    expect(incidents.filter((i) => i.title === summary)).toHaveLength(1);
    expect(incidents.filter((i) => i.title === message)).toHaveLength(1);
  }, 120_000);
}
