import { allServices } from "../all-services.js";
import { main } from "../runtime/process.js";

// One process runs every service and the public gateway: the try-it-out mode.
await main({ name: "warroom", services: allServices, gateway: true });
