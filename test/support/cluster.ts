import type { Cluster } from "../../services/process/cluster.js";
import { startTestCluster } from "./compiled-services.js";
import { callApi, freshDatabase, OWNER, type TestApp } from "./app.js";
import { startPrivateNats } from "./nats-server.js";

/**
 * The whole service as separate processes over NATS (two gateways, two intakes) against a fresh
 * database, presented like TestApp: calls go to the first gateway; `gatewayUrls` has them all.
 */
export async function startClusterApp(
  options: {
    env?: Record<string, string>;
    output?: "ignore" | "capture";
    intakes?: number;
    /** Extra nats-server configuration (e.g. an authorization block) and each service's own environment. */
    natsConfig?: string;
    envFor?: (name: string) => Record<string, string>;
  } = {},
): Promise<TestApp & { cluster: Cluster; gatewayUrls: string[] }> {
  const database = await freshDatabase({ migrated: true });
  // A NATS server of its own: subjects are global, and another cluster on the same server would
  // answer this one's calls against a different database.
  const nats = await startPrivateNats({ config: options.natsConfig });
  const cluster = await startTestCluster({
    env: {
      ...process.env,
      DATABASE_URL: database.url,
      NATS_URL: nats.url,
      HOST: "127.0.0.1",
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "warn",
      BOOTSTRAP_ORG_SLUG: OWNER.org,
      BOOTSTRAP_OWNER_EMAIL: OWNER.email,
      BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
      SHUTDOWN_GRACE_SECONDS: "1",
      DATABASE_POOL_SIZE: "4",
      ...options.env,
    },
    envFor: options.envFor,
    output: options.output ?? "ignore",
    port: 0,
    gateways: 2,
    intakes: options.intakes ?? 2,
  });
  const url = cluster.gatewayUrls[0]!;
  const app = {
    url,
    natsUrl: nats.url,
    cluster,
    gatewayUrls: cluster.gatewayUrls,
    databaseUrl: database.url,
    process: undefined as never,
    async stop() {
      await cluster.stop();
      await nats.cleanup();
      await database.drop();
    },
    call: (method: string, path: string, options?: Parameters<TestApp["call"]>[2]) => callApi(url, method, path, options),
    async ownerToken() {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const res = await callApi(url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
        if (res.status === 200) return res.body.accessToken as string;
        // The identity process bootstraps the organization just after it becomes ready.
        if (Date.now() > deadline) throw new Error(`login failed: ${res.status} ${JSON.stringify(res.body)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
  };
  return app;
}
