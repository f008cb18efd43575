import type { ServiceImpl } from "@connectrpc/connect";
import type { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { createAppendTimelineHandlers } from "./append-timeline.js";
import { createBulkHandlers } from "./bulk.js";
import type { IncidentsDeps } from "./deps.js";
import { createEscalationPolicyHandlers } from "./escalation/escalation-policy.js";
import { createFindLatestOpenHandlers } from "./find-latest-open.js";
import { createListAndGetHandlers } from "./list-and-get.js";
import { createMaintenanceWindowEndHandlers } from "./maintenance-windows/maintenance-window-end.js";
import { createMaintenanceWindowHandlers } from "./maintenance-windows/maintenance-windows.js";
import { createRecordHandlers } from "./record.js";
import { groupCommitted } from "./group-commit.js";
import { createRecordBatch, createRecordManyHandlers } from "./record-many.js";
import { createResolveAndArchiveHandlers } from "./resolve-and-archive.js";
import { createRespondHandlers } from "./respond.js";
import { createSeverityHandlers } from "./severity.js";

/** Every IncidentsService method, from its handler groups. */
export function createIncidentsRoutes(deps: IncidentsDeps): ServiceImpl<typeof IncidentsService> {
  const delivery = { ...deps, sql: deps.deliverySql };
  const recordHandlers = createRecordHandlers(delivery);
  return {
    record: groupCommitted(recordHandlers.record, createRecordBatch(delivery)),
    ...createRecordManyHandlers({ ...delivery, record: recordHandlers.record }),
    ...createAppendTimelineHandlers(deps),
    ...createFindLatestOpenHandlers(deps),
    ...createListAndGetHandlers(deps),
    ...createResolveAndArchiveHandlers(deps),
    ...createSeverityHandlers(deps),
    ...createRespondHandlers(deps),
    ...createBulkHandlers(deps),
    ...createMaintenanceWindowHandlers(deps),
    ...createMaintenanceWindowEndHandlers(deps),
    ...createEscalationPolicyHandlers(deps),
  };
}
