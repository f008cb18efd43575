import { main } from "../process/run-process.js";
import { createHeartbeatsService } from "./service.js";

await main({ name: "heartbeats", services: [createHeartbeatsService], gateway: false });
