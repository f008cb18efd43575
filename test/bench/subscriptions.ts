import { randomBytes } from "node:crypto";
import { setFlagsFromString } from "node:v8";
import postgres from "postgres";
import { runInNewContext } from "node:vm";
import { makeTestCertificates, type TestCertificates } from "../support/https-receiver.js";
import { createClients } from "../../services/runtime/transport/clients.js";
import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { postSigned } from "../../services/subscriptions/send.js";
import { createSubscriptionEgress } from "../../services/subscriptions/send.js";
import { startWebhookReceiver, type WebhookReceiver } from "../../services/subscriptions/testing/webhook-receiver.js";
import { newSigningSecret, webhookIdFor } from "../../services/subscriptions/signing.js";
import { startApp } from "../support/app.js";
import { printTable } from "./stats.js";

/**
 * A storm through event subscriptions: 1,000 incidents opened as fast as the incident core takes
 * them, three subscriptions to incident.opened, one of them down (connections dropped, retried on
 * the production schedule), in one process (the default mode) and over NATS (JetStream durable
 * consumers feed the fan-out). Prints, per mode, how long after the storm's end the two healthy
 * receivers had every event, whether any was lost, and the memory before and after. Floor,
 * measured in the same run: the same number of signed posts sent straight through the egress
 * client to the same receiver, at the same concurrency (SUBSCRIPTION_CONCURRENCY per
 * subscription), without the service around them. `SUBSCRIPTIONS_BENCH_MODES=one` or `=nats`
 * runs one mode; `STORM_INCIDENTS` sets the storm's size.
 */
const INCIDENTS = Number(process.env.STORM_INCIDENTS ?? 1000);
const CONCURRENCY = 4;
const MODES = (process.env.SUBSCRIPTIONS_BENCH_MODES ?? "one,nats").split(",");
/** The target: the healthy receivers have every event this soon after the storm's end. */
const TARGET_SECONDS = 30;

setFlagsFromString("--expose-gc");
const collect = runInNewContext("gc") as () => void;
/** Heap and RSS after a full collection, in MiB: what the process still holds, not its garbage. */
function memory(): { heapMiB: number; rssMiB: number } {
  collect();
  const used = process.memoryUsage();
  return { heapMiB: Number((used.heapUsed / 2 ** 20).toFixed(1)), rssMiB: Number((used.rss / 2 ** 20).toFixed(1)) };
}

export async function benchSubscriptions(): Promise<void> {
  const certs = makeTestCertificates();
  const receiver = await startWebhookReceiver(certs);
  const secret = newSigningSecret();
  try {
    // Floor: two receivers' worth of signed posts, each at the per-subscription concurrency.
    receiver.endpoint("floor", [secret]);
    const egress = createSubscriptionEgress({ EGRESS_CA_FILE: certs.caFile, EGRESS_ALLOW_PRIVATE_CIDRS: ["127.0.0.0/8"], SUBSCRIPTION_TIMEOUT_SECONDS: 10 });
    const body = JSON.stringify({ type: "incident.opened", timestamp: new Date().toISOString(), data: { incidentId: "floor" } });
    const floorStart = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 2 * CONCURRENCY }, async () => {
        while (next++ < 2 * INCIDENTS) await postSigned(egress, receiver.url("floor"), [secret], webhookIdFor("floor", String(next)), body);
      }),
    );
    const floorSeconds = (performance.now() - floorStart) / 1000;
    egress.close();

    const rows: Record<string, string | number>[] = [];
    for (const mode of MODES) {
      const figures = await storm(mode === "nats", certs, receiver, floorSeconds);
      rows.push({
        mode: mode === "nats" ? "over NATS" : "one process",
        "storm s": figures.stormSeconds,
        "healthy drained, s after the storm": figures.healthyDrainedSecondsAfterStorm,
        "floor s (same run)": figures.floorSecondsForTheSamePosts,
        lost: figures.lost,
        unverified: figures.unverified,
        "RSS MiB before → after": `${figures.memoryBefore.rssMiB} → ${figures.memoryAfter.rssMiB}`,
        "heap MiB before → after": `${figures.memoryBefore.heapMiB} → ${figures.memoryAfter.heapMiB}`,
        [`within ${TARGET_SECONDS} s`]: figures.healthyDrainedSecondsAfterStorm <= TARGET_SECONDS && figures.lost === 0 ? "yes" : "no",
      });
    }
    printTable(
      `${INCIDENTS} incidents opened in a storm, three subscriptions to incident.opened, one down; floor: the same ${2 * INCIDENTS} signed posts straight through the egress client, same run`,
      rows,
    );
  } finally {
    await receiver.close();
    certs.remove();
  }
}

/** One storm through a fresh app, in one process or over NATS: its figures, printed as they come. */
async function storm(overNats: boolean, certs: TestCertificates, receiver: WebhookReceiver, floorSeconds: number) {
  const app = await startApp({
    ...(overNats ? { nats: true } : {}),
    env: {
      SECRETS_KEYS: newSecretKeyEntry("k1"),
      EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
      EGRESS_CA_FILE: certs.caFile,
      LOG_LEVEL: "warn",
    },
  });
  const mode = overNats ? "nats" : "one";
  try {
    const clients = createClients(app.process.transport);
    const orgId = (await clients.identity.getOrganization({ slug: "acme" })).id;
    const owner = await app.ownerToken();
    await app.call("PUT", "/o/acme/oncall/egress", { token: owner, body: { enabled: true } });
    const healthyA = `healthy-a-${mode}`;
    const healthyB = `healthy-b-${mode}`;
    for (const [name, up] of [
      [healthyA, true],
      [healthyB, true],
      [`down-${mode}`, false],
    ] as const) {
      receiver.endpoint(name, [], up ? () => ({ status: 204 }) : () => "drop");
      const res = await app.call("POST", "/o/acme/subscriptions", { token: owner, body: { url: receiver.url(name), events: ["incident.opened"] } });
      receiver.setSecrets(name, [res.body.secret]);
    }
    const run = randomBytes(4).toString("hex");
    const before = memory();
    const opened: string[] = [];
    let i = 0;
    const stormStart = performance.now();
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (i < INCIDENTS) {
          const n = i++;
          const res = await clients.incidents.record({
            orgId,
            orgSlug: "acme",
            alert: { source: "metrics-monitor", attachIdentity: `storm-${run}-${n}`, kind: "alert", title: `storm ${n}`, severity: "sev3", summary: "" },
          });
          opened.push(res.incident!.id);
        }
      }),
    );
    const stormEnd = performance.now();
    const got = (name: string) => new Set(receiver.deliveries.filter((d) => d.endpoint === name && d.accepted).map((d) => String(d.event.data.incidentId)));
    const deadline = stormEnd + 300_000;
    // Where the drain stands every 5 s: deliveries queued by the fan-out against those sent, so a
    // slow drain says whether the fan-out or the sending holds it back.
    const sql = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
    const progress: Record<string, number | string>[] = [];
    let nextSample = performance.now();
    try {
      while (performance.now() < deadline && (got(healthyA).size < INCIDENTS || got(healthyB).size < INCIDENTS)) {
        if (performance.now() >= nextSample) {
          nextSample += 5_000;
          const states = await sql<{ state: string; n: number }[]>`select state, count(*)::int as n from subscriptions.deliveries group by state`;
          progress.push({
            secondsAfterStorm: Number(((performance.now() - stormEnd) / 1000).toFixed(0)),
            ...Object.fromEntries(states.map((r) => [r.state, r.n])),
            receivedHealthy: got(healthyA).size + got(healthyB).size,
          });
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await sql.end();
    }
    const drainedAfter = (performance.now() - stormEnd) / 1000;
    // The down receiver's deliveries are still waiting for their retries: rows in the database, not memory.
    const after = memory();
    const lost = opened.filter((id) => !got(healthyA).has(id) || !got(healthyB).has(id)).length;
    const figures = {
      bench: `subscriptions storm, ${overNats ? "over NATS" : "one process"}`,
      incidents: INCIDENTS,
      stormSeconds: Number(((stormEnd - stormStart) / 1000).toFixed(1)),
      healthyDrainedSecondsAfterStorm: Number(drainedAfter.toFixed(1)),
      floorSecondsForTheSamePosts: Number(floorSeconds.toFixed(1)),
      healthyA: got(healthyA).size,
      healthyB: got(healthyB).size,
      lost,
      unverified: receiver.deliveries.filter((d) => d.endpoint.endsWith(`-${mode}`) && !d.verified).length,
      floorRatio: Number((floorSeconds / Math.max(drainedAfter, 0.1)).toFixed(2)),
      target: `healthy receivers complete within ${TARGET_SECONDS} s of the storm's end; memory flat`,
      memoryBefore: before,
      memoryAfter: after,
      heapGrowthMiB: Number((after.heapMiB - before.heapMiB).toFixed(1)),
    };
    console.table(progress);
    console.log(JSON.stringify(figures, null, 2));
    return figures;
  } finally {
    await app.stop();
  }
}
