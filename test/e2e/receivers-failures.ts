import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { callApi } from "../support/app.js";
import { getIncident, killChild, listIncidents, startClusterProcess, unique, type Answer, type Credentials, type SuiteContext } from "./triggers-kit.js";

/**
 * The chat receiver's failure answers that need more than one call: the per-minute limit across
 * every gateway and intake replica, and 503 on a real failure of the incident core, with the
 * retry of the same message attaching.
 */

export interface FailureContext extends SuiteContext {
  /** An organization of its own, so the limit test's calls count for nobody else. */
  limited: Credentials & { slug: string };
}

export const CHAT_CALLS_PER_MINUTE = 60;

/** Waits until the database clock is early in a minute, so a burst of calls stays in one window. */
export async function earlyInTheMinute(db: postgres.Sql, latestSecond = 40): Promise<void> {
  for (;;) {
    const [row] = await db<{ second: number }[]>`select extract(second from clock_timestamp())::float8 as second`;
    if (row!.second < latestSecond) return;
    await new Promise((r) => setTimeout(r, (60.5 - row!.second) * 1000));
  }
}

export function chatFailureSuite(ctx: FailureContext): void {
  let db: postgres.Sql;

  beforeAll(() => {
    db = postgres(ctx.app.databaseUrl, { max: 1, onnotice: () => {} });
  });

  afterAll(async () => {
    await db?.end();
  });

  const post = (url: string, slug: string, secret: string, body: unknown): Promise<Answer> =>
    callApi(url, "POST", `/triggers/chat/${slug}`, {
      headers: { "content-type": "application/json", "x-service-chat-secret": secret },
      raw: JSON.stringify(body),
    });

  it("more than 60 calls a minute to an organization's route answer 429 with Retry-After, counted across every gateway", async () => {
    const { slug, chatSecret } = ctx.limited;
    await earlyInTheMinute(db);
    const urls = ctx.app.gatewayUrls;
    const within = await Promise.all(
      Array.from({ length: CHAT_CALLS_PER_MINUTE }, (_, i) => post(urls[i % urls.length]!, slug, chatSecret, { channel_id: "C-limit", text: `call ${i}` })),
    );
    expect(within.map((a) => a.status)).toEqual(Array(CHAT_CALLS_PER_MINUTE).fill(200));
    for (const url of urls) {
      const over = await post(url, slug, chatSecret, { channel_id: "C-limit", message_id: unique("m"), text: "one too many" });
      expect(over.status).toBe(429);
      expect(over.body.error).toMatch(/60 calls a minute/);
      const retryAfter = Number(over.headers.get("retry-after"));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
    }
    // Another organization's route is not affected.
    const acme = await post(ctx.app.url, "acme", ctx.creds.chatSecret, { channel_id: "C-limit" });
    expect(acme.status).toBe(200);
  }, 90_000);

  it("a failure while opening or attaching answers 503 {error: unavailable}; the retry of the same message attaches instead of doubling", async () => {
    const secret = ctx.creds.chatSecret;
    const seen = { channel_id: "C-failure", message_id: unique("seen"), text: "card payments failing" };
    const fresh = { channel_id: "C-failure", message_id: unique("fresh"), text: `${unique("Fresh")} declines spiking` };
    const opened = await post(ctx.app.url, "acme", secret, seen);
    expect(opened.status).toBe(201);
    // The same message again, from another reaction.
    const seenAgain = { ...seen, emoji: "fire" };

    const restore = await breakTheIncidentCore(ctx, db);
    let failed: Answer[];
    try {
      failed = [await post(ctx.app.url, "acme", secret, seenAgain), await post(ctx.app.url, "acme", secret, fresh)];
    } finally {
      await restore();
    }
    for (const res of failed) {
      expect(res.status).toBe(503);
      expect(res.body).toEqual({ error: "unavailable" });
      expect(res.headers.get("retry-after")).toBe("2");
    }

    // The message that had opened before the failure: the retry attaches to the same incident,
    // and the failed attempt left nothing behind.
    const retried = await post(ctx.app.url, "acme", secret, seenAgain);
    expect(retried.status).toBe(200);
    expect(retried.body).toMatchObject({ outcome: "attached", incidentId: opened.body.incidentId });
    const got = await getIncident(ctx.app, ctx.creds.owner, opened.body.incidentId);
    expect(got.timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);

    // The message whose opening failed: the retry opens it once, and a further delivery of it
    // attaches to that incident as a repeat.
    const freshRetry = await post(ctx.app.url, "acme", secret, fresh);
    expect(freshRetry.status).toBe(201);
    const freshAgain = await post(ctx.app.url, "acme", secret, fresh);
    expect(freshAgain.status).toBe(200);
    expect(freshAgain.body).toMatchObject({ outcome: "attached", incidentId: freshRetry.body.incidentId });
    const titled = (await listIncidents(ctx.app, ctx.creds.owner)).filter((i) => i.title === `Chat: ${fresh.text}`);
    expect(titled).toHaveLength(1);
    expect((await getIncident(ctx.app, ctx.creds.owner, freshRetry.body.incidentId)).timeline.map((e: any) => e.kind)).toEqual(["opened", "repeat"]);
  }, 120_000);
}

/**
 * A real failure of the incident core. One process: its timeline table disappears under it (the
 * database refuses every open and attach). Separate processes: the incidents process is stopped,
 * so nothing answers its NATS subjects. Returns how to undo it.
 */
export async function breakTheIncidentCore(ctx: FailureContext, db: postgres.Sql): Promise<() => Promise<void>> {
  if (!ctx.app.cluster) {
    await db`alter table incidents.timeline_entries rename to timeline_entries_unavailable`;
    return async () => {
      await db`alter table incidents.timeline_entries_unavailable rename to timeline_entries`;
    };
  }
  const processes = ctx.app.cluster.processes;
  const incidents = processes.filter((p) => p.name === "incidents");
  expect(incidents.length).toBeGreaterThan(0);
  // SIGKILL: the local cluster restarts a process that ends any other way, as Kubernetes would.
  for (const p of incidents) await killChild(p.child);
  return async () => {
    const child = await startClusterProcess(ctx.app, "incidents");
    // Stopped with the rest of the cluster.
    processes.push({ name: "incidents", port: 0, metricsPort: 0, child, output: [] });
  };
}
