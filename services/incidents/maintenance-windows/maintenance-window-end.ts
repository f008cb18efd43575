import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { IncidentsService } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { isUuid } from "../../runtime/ids.js";
import type { MaintenanceWindowEndRow } from "../store.js";
import type { IncidentsDeps } from "../deps.js";

/**
 * Internal: the end of a maintenance window, by the database clock. A service whose delivery a
 * window suppressed asks it to know when to offer the delivery again, without a second
 * suppression (and a second audit row) for every check while the window lasts.
 */
export function createMaintenanceWindowEndHandlers(deps: Pick<IncidentsDeps, "sql">): Pick<ServiceImpl<typeof IncidentsService>, "getMaintenanceWindowEnd"> {
  const { sql } = deps;
  return {
    async getMaintenanceWindowEnd(req) {
      const valid = isUuid(req.orgId) && isUuid(req.id);
      const [row] = await sql<MaintenanceWindowEndRow[]>`
        select now() as now,
          (select ends_at from incidents.maintenance_windows
            where ${valid} and org_id = ${valid ? req.orgId : null}::uuid and id = ${valid ? req.id : null}::uuid) as ends_at`;
      return { now: timestampFromDate(row!.now), endsAt: row!.ends_at ? timestampFromDate(row!.ends_at) : undefined };
    },
  };
}
