import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { allServices } from "../../services/all-services.js";
import { runProcess } from "../../services/runtime/process.js";
import { callApi, OWNER } from "../support/app.js";

const dataDir = mkdtempSync(join(tmpdir(), "wr-embedded-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

const env = {
  DATABASE_URL: "",
  NATS_URL: "",
  DATA_DIR: dataDir,
  PORT: "0",
  HOST: "127.0.0.1",
  LOG_LEVEL: "silent",
  BOOTSTRAP_ORG_SLUG: OWNER.org,
  BOOTSTRAP_OWNER_EMAIL: OWNER.email,
  BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
  SHUTDOWN_GRACE_SECONDS: "1",
};

describe("one-process mode with the embedded database", () => {
  it("starts with no database server, and keeps its data across a restart", async () => {
    const first = await runProcess({ name: "embedded", services: allServices, gateway: true, env });
    let apiKey: string;
    try {
      expect(first.database.embedded).toBe(true);
      expect((await callApi(first.url, "GET", "/healthz")).status).toBe(200);
      expect((await callApi(first.url, "GET", "/readyz")).status).toBe(200);
      const login = await callApi(first.url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
      expect(login.status).toBe(200);
      const key = await callApi(first.url, "POST", "/o/acme/api-keys", { token: login.body.accessToken, body: { name: "restart" } });
      expect(key.status).toBe(201);
      apiKey = key.body.key;
    } finally {
      await first.stop();
    }

    const second = await runProcess({ name: "embedded", services: allServices, gateway: true, env });
    try {
      const events = await callApi(second.url, "GET", "/o/acme/audit-events", { token: apiKey });
      expect(events.status).toBe(200);
      expect(events.body.events.map((e: { kind: string }) => e.kind)).toContain("api_key.created");
    } finally {
      await second.stop();
    }
  }, 60_000);
});
