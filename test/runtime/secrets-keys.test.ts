import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { KEY_FILE_NAME, newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { freshDatabase, OWNER, startApp } from "../support/app.js";
import { startServiceProcess, tempDataDir } from "../support/service-process.js";

/**
 * Secrets at rest (webhook URLs, credentials, heartbeat ping keys) are sealed under SECRETS_KEYS.
 * With an external database the key must come from configuration: a key generated in a container's
 * DATA_DIR is lost with the container, and every sealed value with it.
 */

const cleanups: Array<() => unknown> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

describe("SECRETS_KEYS with an external database", () => {
  it("is required: without it the service refuses to start, says how to make a key, and writes no key file", async () => {
    const database = await freshDatabase();
    cleanups.push(() => database.drop());
    const data = tempDataDir("wr-secrets-");
    cleanups.push(() => data.cleanup());
    const service = startServiceProcess({
      DATABASE_URL: database.url,
      SECRETS_KEYS: "",
      NATS_URL: "",
      DATA_DIR: data.dir,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "info",
      BOOTSTRAP_ORG_SLUG: OWNER.org,
      BOOTSTRAP_OWNER_EMAIL: OWNER.email,
      BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
    });
    const hang = setTimeout(() => service.child.kill("SIGKILL"), 90_000);
    const { code } = await service.exited;
    clearTimeout(hang);
    expect(code).toBe(1);
    expect(service.output()).toMatch(/SECRETS_KEYS is not set/);
    expect(service.output()).toMatch(/randomBytes\(32\)/);
    expect(service.output()).not.toMatch(/"msg":"serving"/);
    expect(existsSync(join(data.dir, KEY_FILE_NAME))).toBe(false);
  });

  it("keeps sealed values across restarts, and a rotation (new key first, old keys after) still opens the old ones", async () => {
    const database = await freshDatabase();
    cleanups.push(() => database.drop());
    const oldKey = newSecretKeyEntry("old");
    const newKey = newSecretKeyEntry("new");
    const run = async (keys: string, work: (app: Awaited<ReturnType<typeof startApp>>, owner: string) => Promise<void>) => {
      const app = await startApp({ databaseUrl: database.url, env: { SECRETS_KEYS: keys } });
      try {
        await work(app, await app.ownerToken());
      } finally {
        await app.stop();
      }
    };
    const pingUrl = async (app: Awaited<ReturnType<typeof startApp>>, owner: string, name: string) => {
      const res = await app.call("GET", `/o/${OWNER.org}/heartbeats/${name}`, { token: owner });
      expect(res.status).toBe(200);
      // The path only: the port changes from start to start.
      return new URL(res.body.pingUrl || "http://unset/").pathname;
    };
    const register = async (app: Awaited<ReturnType<typeof startApp>>, owner: string, name: string) => {
      const res = await app.call("POST", `/o/${OWNER.org}/heartbeats`, { token: owner, body: { name, expectedIntervalSeconds: 60, graceSeconds: 30 } });
      expect(res.status).toBe(201);
      return new URL(res.body.pingUrl).pathname;
    };

    let first = "";
    await run(oldKey, async (app, owner) => {
      first = await register(app, owner, "nightly");
      expect(first).toMatch(/^\/ping\/.+/);
    });
    let second = "";
    await run(`${newKey},${oldKey}`, async (app, owner) => {
      expect(await pingUrl(app, owner, "nightly")).toBe(first);
      second = await register(app, owner, "hourly");
    });
    // Without the old key, what it sealed no longer opens; what the new key sealed does.
    await run(newKey, async (app, owner) => {
      expect(await pingUrl(app, owner, "hourly")).toBe(second);
      expect(await pingUrl(app, owner, "nightly")).toBe("/");
    });
  });
});
