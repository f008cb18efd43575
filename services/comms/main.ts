import { main } from "../process/run-process.js";
import { createCommsService } from "./service.js";

await main({ name: "comms", services: [createCommsService], gateway: false });
