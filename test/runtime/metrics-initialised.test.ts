import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApp, type TestApp } from "../support/app.js";

/**
 * The alert rules watch counters with increase(): a series that first appears at its first event
 * has no increase, and the alert misses it. Every labelled counter the rules use is at 0 from the
 * first scrape, for the label values known at start.
 */

let app: TestApp;
beforeAll(async () => {
  // Over NATS: the durable JetStream consumers (and their dead letters) exist only there.
  app = await startApp({ nats: true });
});
afterAll(async () => {
  await app?.stop();
});

describe("the counters the alert rules use", () => {
  it("are exported at 0 from the first scrape, before anything happened", async () => {
    const text = await (await fetch(app.process.metricsUrl!)).text();
    const zero = (series: string) => expect(text, series).toMatch(new RegExp(`^${series.replace(/[{}"]/g, "\\$&")} 0$`, "m"));
    for (const service of ["identity", "incidents", "intake", "comms", "heartbeats", "subscriptions"])
      zero(`warroom_outbox_dead_letters_total{service="${service}"}`);
    expect(text).toMatch(/^warroom_event_dead_letters_total\{consumer="[^"]+"\} 0$/m);
    // A sweep runs on its own timer and may have finished one already: there from the start.
    for (const result of ["ok", "partial", "failed"]) expect(text).toMatch(new RegExp(`^warroom_heartbeat_sweeps_total\\{result="${result}"\\} \\d+$`, "m"));
    for (const outcome of ["delivered", "failed", "gone", "simulated"]) zero(`warroom_subscription_attempts_total{outcome="${outcome}"}`);
    for (const reason of ["gone", "failing"]) zero(`warroom_subscriptions_disabled_total{reason="${reason}"}`);
    zero("warroom_subscription_deliveries_failed_total");
    for (const result of ["ok", "http_error", "timeout", "tls", "network", "refused", "error"]) zero(`warroom_chat_webhook_requests_total{result="${result}"}`);
  });
});
