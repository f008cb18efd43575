import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { FindLatestOpenRequest, IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { InvalidArgumentError } from "../runtime/errors.js";
import { isSourceBadge, SOURCE_BADGES } from "../domain/vocabulary.js";
import type { IncidentsDeps } from "./deps.js";

/**
 * FindLatestOpen: the most recently opened open incident of a source badge in an organization.
 * A PagerDuty change event names no alert; it belongs with what its integration has open now.
 * The caller records on the returned attach identity through Record, which re-checks that the
 * incident is still open, so a resolve in between only makes the delivery `ignored`.
 */
export function createFindLatestOpenHandlers(deps: Pick<IncidentsDeps, "sql">): Pick<ServiceImpl<typeof IncidentsService>, "findLatestOpen"> {
  const { sql } = deps;
  return {
    async findLatestOpen(req: FindLatestOpenRequest) {
      if (req.attachIdentity !== undefined) {
        // By the key only the open incidents' index holds (see record.ts).
        const [open] = await sql<{ id: string; attach_identity: string; opened_at: Date }[]>`
          select id, attach_identity, opened_at from incidents.incidents
          where (org_id::text || open_identity) = (${req.orgId}::uuid::text || ${req.attachIdentity}::text)`;
        return open ? { incidentId: open.id, attachIdentity: open.attach_identity, openedAt: timestampFromDate(open.opened_at) } : {};
      }
      if (!isSourceBadge(req.source)) throw new InvalidArgumentError(`source must be one of ${SOURCE_BADGES.join(", ")} or a custom source's name`);
      const [row] = await sql<{ id: string; attach_identity: string; opened_at: Date }[]>`
        select id, attach_identity, opened_at from incidents.incidents
        where org_id = ${req.orgId} and source = ${req.source} and state = 'open' and attach_identity is not null
        order by opened_at desc, id desc limit 1`;
      return row ? { incidentId: row.id, attachIdentity: row.attach_identity, openedAt: timestampFromDate(row.opened_at) } : {};
    },
  };
}
