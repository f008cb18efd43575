import { main } from "../runtime/process.js";

// The public edge alone: REST routes, Connect and gRPC, every call passed on over NATS.
await main({ name: "gateway", services: [], gateway: true });
