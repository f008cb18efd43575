import { main } from "../runtime/process.js";
import { createIdentityService } from "./service.js";

await main({ name: "identity", services: [createIdentityService], gateway: false });
