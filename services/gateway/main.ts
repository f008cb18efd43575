import { createConsoleHttp } from "../console/console-http.js";
import { main } from "../process/run-process.js";

// The public edge alone: REST routes, Connect and gRPC, every call passed on over NATS, and the web console.
await main({ name: "gateway", services: [], gateway: true, extraHttp: createConsoleHttp });
