import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callApi, startApp, type TestApp } from "../support/app.js";
import { CHAT_CALLS_PER_MINUTE, earlyInTheMinute } from "./receivers-failures.js";
import { issueCredentials, PUBLIC_URL, unique, type Credentials } from "./triggers-kit.js";

/**
 * The chat receiver's 60 calls a minute hold per organization across processes: two processes,
 * each a whole service with its own gateway and intake, share one database and one count.
 */
describe("the chat receiver's limit, shared by two processes on one database", () => {
  let first: TestApp;
  let second: TestApp;
  let creds: Credentials;
  let db: postgres.Sql;

  beforeAll(async () => {
    first = await startApp({ env: { PUBLIC_URL } });
    second = await startApp({ env: { PUBLIC_URL }, databaseUrl: first.databaseUrl });
    creds = await issueCredentials(first);
    db = postgres(first.databaseUrl, { max: 1, onnotice: () => {} });
  }, 120_000);

  afterAll(async () => {
    await db?.end();
    await second?.stop();
    await first?.stop();
  });

  const post = (app: TestApp, body: unknown) =>
    callApi(app.url, "POST", "/triggers/chat/acme", {
      headers: { "content-type": "application/json", "x-service-chat-secret": creds.chatSecret },
      raw: JSON.stringify(body),
    });

  it("30 calls through each process pass; the next one through either answers 429 with Retry-After", async () => {
    await earlyInTheMinute(db);
    const half = CHAT_CALLS_PER_MINUTE / 2;
    const calls = [
      ...Array.from({ length: half }, (_, i) => post(first, { channel_id: "C-shared", message_id: unique(`first-${i}`), text: "shared limit" })),
      ...Array.from({ length: half }, (_, i) => post(second, { channel_id: "C-shared", message_id: unique(`second-${i}`), text: "shared limit" })),
    ];
    const answers = await Promise.all(calls);
    // Each message opens its own incident: every call did real work.
    expect(answers.map((a) => a.status)).toEqual(Array(CHAT_CALLS_PER_MINUTE).fill(201));
    for (const app of [first, second]) {
      const over = await post(app, { channel_id: "C-shared", message_id: unique("over"), text: "one too many" });
      expect(over.status).toBe(429);
      expect(over.body).toEqual({ error: `more than ${CHAT_CALLS_PER_MINUTE} calls a minute to this route` });
      const retryAfter = Number(over.headers.get("retry-after"));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
    }
    // Neither process alone saw more than half the calls: the count is the database's.
    const [row] = await db<{ calls: number }[]>`
      select calls from intake.chat_rate_windows where org_slug = 'acme' order by window_start desc limit 1`;
    expect(row!.calls).toBe(CHAT_CALLS_PER_MINUTE + 2);
  });
});
