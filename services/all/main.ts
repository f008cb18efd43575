import { allServices } from "../process/all-services.js";
import { createConsoleHttp } from "../console/console-http.js";
import { main } from "../process/run-process.js";

// One process runs every service and the public gateway (with the web console): the try-it-out mode.
await main({ name: "warroom", services: allServices, gateway: true, extraHttp: createConsoleHttp });
