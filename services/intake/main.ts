import { main } from "../process/run-process.js";
import { createIntakeService } from "./service.js";

await main({ name: "intake", services: [createIntakeService], gateway: false });
