import type { ConnectRouter } from "@connectrpc/connect";
import { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Clients } from "../runtime/clients.js";
import type { Config } from "../runtime/config.js";
import type { Sql } from "../runtime/database.js";
import type { Outbox } from "../runtime/outbox.js";
import { createAppendTimelineHandlers } from "./append-timeline.js";
import { createFindLatestOpenHandlers } from "./find-latest-open.js";
import { createListAndGetHandlers } from "./list-and-get.js";
import { createMaintenanceWindowEndHandlers } from "./maintenance-window-end.js";
import { createMaintenanceWindowHandlers } from "./maintenance-windows.js";
import { createRecordHandlers } from "./record.js";
import { groupCommitted } from "./group-commit.js";
import { createRecordBatch, createRecordManyHandlers } from "./record-many.js";
import { createResolveAndArchiveHandlers } from "./resolve-and-archive.js";

export interface IncidentsDeps {
  sql: Sql;
  config: Config;
  clients: Clients;
  outbox: Outbox;
}

/** Wires every handler group of IncidentsService into the router. */
export function registerIncidentRoutes(router: ConnectRouter, deps: IncidentsDeps): void {
  const recordHandlers = createRecordHandlers(deps);
  router.service(IncidentsService, {
    record: groupCommitted(recordHandlers.record, createRecordBatch(deps)),
    ...createRecordManyHandlers({ ...deps, record: recordHandlers.record }),
    ...createAppendTimelineHandlers(deps),
    ...createFindLatestOpenHandlers(deps),
    ...createListAndGetHandlers(deps),
    ...createResolveAndArchiveHandlers(deps),
    ...createMaintenanceWindowHandlers(deps),
    ...createMaintenanceWindowEndHandlers(deps),
  });
}
