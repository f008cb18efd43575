import { main } from "../runtime/process.js";
import { createHeartbeatsService } from "./service.js";

await main({ name: "heartbeats", services: [createHeartbeatsService], gateway: false });
