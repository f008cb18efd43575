import { main } from "../process/run-process.js";
import { createIncidentsService } from "./service.js";

await main({ name: "incidents", services: [createIncidentsService], gateway: false });
