import postgres from "postgres";
import { startApp, type TestApp } from "../../../test/support/app.js";
import { makeTestCertificates, type TestCertificates } from "../../../test/support/https-receiver.js";
import { createClients, type Clients } from "../../runtime/transport/clients.js";
import { newSecretKeyEntry } from "../../runtime/credentials/secret-box.js";
import { startWebhookReceiver, type WebhookReceiver } from "./webhook-receiver.js";

/** What a subscriptions test works with: the app, a receiver its egress trusts, and handles on both. */
export interface SubscriptionsHarness {
  app: TestApp;
  certs: TestCertificates;
  receiver: WebhookReceiver;
  /** The app's database, for what the routes do not show (rows left behind, attempts counted). */
  sql: postgres.Sql;
  clients: Clients;
  orgId: string;
  /** An access token of acme's owner. */
  owner: string;
  stop(): Promise<void>;
}

/**
 * Starts the app with signing secrets sealed, egress to the loopback receiver allowed (its CA
 * trusted) and real egress on for acme; `env` adds to or overrides that configuration.
 */
export async function startSubscriptionsHarness(options: { env?: Record<string, string>; nats?: string } = {}): Promise<SubscriptionsHarness> {
  const certs = makeTestCertificates();
  const receiver = await startWebhookReceiver(certs);
  let app: TestApp | undefined;
  let sql: postgres.Sql | undefined;
  const stop = async () => {
    await sql?.end();
    await app?.stop();
    await receiver.close();
    certs.remove();
  };
  try {
    app = await startApp({
      ...(options.nats ? { nats: options.nats } : {}),
      env: { SECRETS_KEYS: newSecretKeyEntry("k1"), EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8", EGRESS_CA_FILE: certs.caFile, ...options.env },
    });
    sql = postgres(app.databaseUrl, { max: 2, onnotice: () => {} });
    const clients = createClients(app.process.transport);
    const orgId = (await clients.identity.getOrganization({ slug: "acme" })).id;
    const owner = await app.ownerToken();
    const egress = await app.call("PUT", "/o/acme/oncall/egress", { token: owner, body: { enabled: true } });
    if (egress.status !== 200) throw new Error(`turning real egress on failed: ${egress.status} ${JSON.stringify(egress.body)}`);
    return { app, certs, receiver, sql, clients, orgId, owner, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
