import { main } from "../process/run-process.js";
import { createIdentityService } from "./service.js";

await main({ name: "identity", services: [createIdentityService], gateway: false });
