import { main } from "../runtime/process.js";
import { createCommsService } from "./service.js";

await main({ name: "comms", services: [createCommsService], gateway: false });
