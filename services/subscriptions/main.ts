import { main } from "../process/run-process.js";
import { createSubscriptionsService } from "./service.js";

await main({ name: "subscriptions", services: [createSubscriptionsService], gateway: false });
