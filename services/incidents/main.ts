import { main } from "../runtime/process.js";
import { createIncidentsService } from "./service.js";

await main({ name: "incidents", services: [createIncidentsService], gateway: false });
