import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { startTestServers } from "../support/test-servers.js";

/**
 * `npm run bench -- <name>`: runs the named benchmark (or all) and prints its figures.
 * Benchmarks compare against a floor measured in the same run where one applies, because
 * absolute numbers on a shared machine mean little. Like `npm test`, it runs on a Postgres and a
 * NATS of its own on free ports unless DATABASE_URL / NATS_URL name others.
 */
const benches: Record<string, () => Promise<void>> = {
  transport: async () => (await import("./transport.js")).benchTransport(),
  intake: async () => (await import("./intake.js")).benchIntake(),
  "custom-source": async () => (await import("./custom-source.js")).benchCustomSource(),
  "hostile-cel": async () => (await import("./custom-source.js")).benchHostileCel(),
  heartbeats: async () => (await import("./heartbeats.js")).benchHeartbeats(),
  subscriptions: async () => (await import("./subscriptions.js")).benchSubscriptions(),
  "fan-out": async () => (await import("./fan-out.js")).benchFanOut(),
  fairness: async () => (await import("./fairness.js")).benchFairness(),
  overload: async () => (await import("./fairness.js")).benchOverload(),
  backup: async () => (await import("./backup.js")).benchBackup(),
  // Not part of the default run: a CPU profile and wait breakdown of the delivery path.
  profile: async () => (await import("./profile.js")).benchProfile(),
};

// Before any benchmark is imported: test/support/app.ts reads them when it loads.
const servers = await startTestServers(process.env);
process.env.DATABASE_URL = servers.databaseUrl;
process.env.NATS_URL = servers.natsUrl;
// Like npm test's (vitest.config.ts): the private nats-server has no users, and a service over NATS
// refuses to start on a server that accepts anyone unless told this is not production.
process.env.NATS_ALLOW_UNAUTHENTICATED ??= "true";
// With a Postgres server the services refuse to start without SECRETS_KEYS; every app of the run shares one.
process.env.SECRETS_KEYS ||= newSecretKeyEntry("bench");
// The servers stop by themselves when this process dies; their folder goes with them here.
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => void servers.stop().finally(() => process.exit(130)));
}

const wanted = process.argv.slice(2).filter((a) => !a.startsWith("-"));
const names = wanted.length ? wanted : Object.keys(benches).filter((name) => name !== "profile");
for (const name of names) {
  const bench = benches[name];
  if (!bench) {
    console.error(`unknown benchmark ${name}; known: ${Object.keys(benches).join(", ")}`);
    await servers.stop();
    process.exit(2);
  }
  try {
    await bench();
  } catch (err) {
    await servers.stop();
    throw err;
  }
}
await servers.stop();
process.exit(0);
