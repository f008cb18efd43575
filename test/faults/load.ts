import type postgres from "postgres";
import { expect } from "vitest";
import { callApi, OWNER } from "../support/app.js";

/**
 * A delivery load as real senders make it: each notification is retried on a 5xx or a network
 * failure (as Datadog and Alertmanager do) until it is acknowledged with a 2xx or its deadline
 * passes. Every notification has its own event id, so the database can be asked afterwards
 * whether each acknowledged one is there exactly once.
 */
export interface Delivery {
  alertId: string;
  eventId: string;
}

export interface LoadResult {
  sent: number;
  acknowledged: Delivery[];
  unacknowledged: Delivery[];
  attempts: number;
  failures: Record<string, number>;
}

export function makeDeliveries(run: string, count: number, groups: number): Delivery[] {
  return Array.from({ length: count }, (_, i) => ({ alertId: `${run}-alert-${i % groups}`, eventId: `${run}-event-${i}` }));
}

export async function runLoad(options: {
  urls: string[];
  token: string;
  deliveries: Delivery[];
  concurrency: number;
  deadlineMs: number;
  /** Called once when this fraction of deliveries has been started. */
  at?: { fraction: number; action: () => Promise<void> };
}): Promise<LoadResult> {
  const result: LoadResult = { sent: options.deliveries.length, acknowledged: [], unacknowledged: [], attempts: 0, failures: {} };
  let next = 0;
  let started = 0;
  let fired: Promise<void> | undefined;
  const fail = (reason: string) => (result.failures[reason] = (result.failures[reason] ?? 0) + 1);
  const worker = async (w: number) => {
    for (;;) {
      const index = next++;
      if (index >= options.deliveries.length) return;
      started++;
      if (options.at && !fired && started >= options.deliveries.length * options.at.fraction) fired = options.at.action();
      const delivery = options.deliveries[index]!;
      const deadline = Date.now() + options.deadlineMs;
      let attempt = 0;
      for (;;) {
        const url = options.urls[(w + attempt) % options.urls.length]!;
        attempt++;
        result.attempts++;
        try {
          const res = await fetch(`${url}/triggers`, {
            method: "POST",
            headers: { authorization: `Bearer ${options.token}`, "content-type": "application/json" },
            body: JSON.stringify({
              title: `fault load ${delivery.alertId}`,
              alert_type: "error",
              alert_transition: "Triggered",
              alert_id: delivery.alertId,
              event_id: delivery.eventId,
              tags: ["service:fault-load"],
            }),
            signal: AbortSignal.timeout(20_000),
          });
          await res.arrayBuffer();
          if (res.status === 200 || res.status === 201) {
            result.acknowledged.push(delivery);
            break;
          }
          fail(`HTTP ${res.status}`);
          if (res.status < 500) {
            result.unacknowledged.push(delivery);
            break;
          }
        } catch (err) {
          fail(`network: ${(err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name}`);
        }
        if (Date.now() > deadline) {
          result.unacknowledged.push(delivery);
          break;
        }
        await new Promise((r) => setTimeout(r, 100 + Math.random() * 200));
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, (_, w) => worker(w)));
  await fired;
  return result;
}

/** A fault test's cluster environment: its own database and NATS, quiet logs, the bootstrap owner. */
export function faultClusterEnv(databaseUrl: string, natsUrl: string, extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return {
    ...process.env,
    DATABASE_URL: databaseUrl,
    NATS_URL: natsUrl,
    HOST: "127.0.0.1",
    LOG_LEVEL: "silent",
    BOOTSTRAP_ORG_SLUG: OWNER.org,
    BOOTSTRAP_OWNER_EMAIL: OWNER.email,
    BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
    ...extra,
  };
}

/** Logs in as the bootstrap owner, retrying while the cluster settles, and issues the organization's ingest token. */
export async function ownerAndIngestToken(gatewayUrl: string): Promise<{ owner: string; ingest: string }> {
  const deadline = Date.now() + 30_000;
  let owner: string | undefined;
  while (!owner) {
    const res = await callApi(gatewayUrl, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
    if (res.status === 200) owner = res.body.accessToken;
    else if (Date.now() > deadline) throw new Error("login never succeeded");
    else await new Promise((r) => setTimeout(r, 200));
  }
  const ingest: string = (await callApi(gatewayUrl, "POST", "/o/acme/triggers/ingest-token", { token: owner })).body.token;
  return { owner, ingest };
}

/** Every acknowledged delivery is held exactly once; nothing else is doubled. Adds the load's row to `report`. */
export async function verifyLoad(sql: postgres.Sql, report: Record<string, string | number>[], name: string, result: LoadResult): Promise<void> {
  const acked = result.acknowledged.map((d) => d.eventId);
  const held = await sql<{ event_id: string; n: number }[]>`
    select event_id, count(*)::int as n from incidents.timeline_entries where event_id = any(${acked}) group by event_id`;
  const found = held.filter((h) => h.n === 1).length;
  const doubled = held.filter((h) => h.n > 1).length;
  const [openPerAlert] = await sql<{ worst: number | null }[]>`
    select max(n)::int as worst from (select count(*) as n from incidents.incidents where state = 'open' group by org_id, attach_identity) t`;
  report.push({
    fault: name,
    sent: result.sent,
    acknowledged: acked.length,
    "found once": found,
    doubled,
    lost: acked.length - found - doubled,
    "retried attempts": result.attempts - result.sent,
    failures: JSON.stringify(result.failures),
  });
  expect(doubled).toBe(0);
  expect(found).toBe(acked.length);
  expect(openPerAlert!.worst).toBe(1);
  expect(result.unacknowledged).toEqual([]);
}
