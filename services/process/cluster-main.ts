import { startCluster } from "./cluster.js";
import { loadConfig } from "../runtime/config/config.js";

// `npm run start:cluster`: every service its own process over NATS, as in production.
const config = loadConfig();
const count = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1 || value > 16) {
    console.error(`${name} must be a whole number from 1 to 16`);
    process.exit(1);
  }
  return value;
};
if (!config.DATABASE_URL || !config.NATS_URL) {
  console.error("start:cluster needs DATABASE_URL and NATS_URL (a Postgres server and a NATS server with JetStream)");
  process.exit(1);
}
const replicas = count("N", 2);
const cluster = await startCluster({ env: process.env, port: config.PORT, gateways: replicas, intakes: replicas, output: "inherit" });
console.log(`cluster ready: gateways at ${cluster.gatewayUrls.join(", ")}; ${cluster.processes.length} processes`);
const stop = () => void cluster.stop().then(() => process.exit(0));
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
