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
