import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshDatabase } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";
import { embeddedEnv, startServiceProcess, tempDataDir, type ServiceProcess } from "../support/service-process.js";

/**
 * The alert rules watch counters with increase(): a series that first appears at its first event
 * has no increase, and the alert misses it. Every labelled counter the rules use is at 0 from the
 * first scrape, for the label values known at start.
 *
 * Read from a process of its own: an app started inside the test run shares the run's metric
 * registry with the apps of other test files, whose background work can still count.
 */

let nats: PrivateNats;
let db: Awaited<ReturnType<typeof freshDatabase>>;
let service: ServiceProcess;
const data = tempDataDir();

beforeAll(async () => {
  // Over NATS: the durable JetStream consumers (and their dead letters) exist only there.
  nats = await startPrivateNats();
  db = await freshDatabase({ migrated: true });
  service = startServiceProcess({
    ...embeddedEnv(data.dir),
    DATABASE_URL: db.url,
    NATS_URL: nats.url,
    METRICS_PORT: "0",
    ...(process.env.SECRETS_KEYS ? { SECRETS_KEYS: process.env.SECRETS_KEYS } : {}),
  });
  await service.serving;
});
afterAll(async () => {
  if (service && service.child.exitCode === null) {
    service.child.kill("SIGTERM");
    await service.exited;
  }
  await nats?.cleanup();
  await db?.drop();
  data.cleanup();
});

describe("the counters the alert rules use", () => {
  it("are exported at 0 from the first scrape, before anything happened", async () => {
    const { metricsUrl } = await service.serving;
    const text = await (await fetch(metricsUrl!)).text();
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
