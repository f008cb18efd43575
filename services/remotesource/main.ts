import { main } from "../process/run-process.js";
import { createRemoteSourceService } from "./service.js";

await main({ name: "remotesource", services: [createRemoteSourceService], gateway: false });
