import { allServices } from "../../all-services.js";
import { runProcess } from "../../runtime/process.js";
import { callApi, freshDatabase, OWNER, type TestApp } from "../../../test/support/app.js";
import { createConsoleHttp, type ConsoleHttpOptions } from "../console-http.js";

/**
 * Test-only: the whole service in this process, like `startApp`, with the web console mounted the
 * way services/all/main.ts mounts it.
 */
export async function startConsoleApp(options: { env?: Record<string, string>; console?: ConsoleHttpOptions; nats?: boolean } = {}): Promise<TestApp> {
  const database = await freshDatabase();
  const running = await runProcess({
    name: "test",
    services: allServices,
    gateway: true,
    extraHttp: (config, runtime) => createConsoleHttp(config, runtime, options.console),
    env: {
      DATABASE_URL: database.url,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "silent",
      NATS_URL: options.nats ? (process.env.NATS_URL ?? "nats://127.0.0.1:4222") : "",
      BOOTSTRAP_ORG_SLUG: OWNER.org,
      BOOTSTRAP_OWNER_EMAIL: OWNER.email,
      BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
      SHUTDOWN_GRACE_SECONDS: "1",
      ...options.env,
    },
  });
  const app: TestApp = {
    url: running.url,
    process: running,
    databaseUrl: database.url,
    async stop() {
      await running.stop();
      await database.drop();
    },
    call: (method, path, callOptions = {}) => callApi(running.url, method, path, callOptions),
    async ownerToken() {
      const res = await app.call("POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
      if (res.status !== 200) throw new Error(`login failed: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body.accessToken as string;
    },
  };
  return app;
}
