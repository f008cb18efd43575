import { randomUUID } from "node:crypto";
import type { JsonObject } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  CreateMaintenanceWindowRequest,
  DeleteMaintenanceWindowRequest,
  EndMaintenanceWindowRequest,
  IncidentsService,
  ListMaintenanceWindowsRequest,
} from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../../runtime/credentials/auth.js";
import { FailedPreconditionError, InvalidArgumentError, NotFoundError } from "../../runtime/errors.js";
import { outboxRows } from "../domain-events.js";
import { isUuid } from "../../runtime/ids.js";
import { maintenanceWindowShape } from "../incident-shape.js";
import type { ClockRow, MaintenanceWindowRow } from "../store.js";
import { checkWindow, MAINTENANCE_LIMITS } from "../../domain/maintenance-window-rules.js";
import { AUDIT_KINDS } from "../../domain/vocabulary.js";
import { currentTraceparent } from "../../runtime/observability/tracing.js";
import type { IncidentsDeps } from "../deps.js";

/**
 * Maintenance windows. A window is active while starts_at <= now() < ends_at by the database
 * clock, and matches a delivery when its sources are empty or name the delivery's badge AND its
 * entities are empty or contain the delivery's entity exactly (the match itself runs in Record's
 * first read, see record.ts). Ending an active window early moves its end to the present moment,
 * so it stays listed under "past"; DELETE removes a window at once, whether it is upcoming,
 * active or over. Creating, ending and deleting are audited, so the history survives the row.
 */

function auditData(row: MaintenanceWindowRow): JsonObject {
  return {
    maintenanceWindowId: row.id,
    startsAt: row.starts_at.toISOString(),
    endsAt: row.ends_at.toISOString(),
    reason: row.reason,
    sources: row.sources,
    entities: row.entities,
  };
}

/**
 * The maintenance-window handlers: create (admin), list, end and delete (admin), each change audited.
 */
export function createMaintenanceWindowHandlers(
  deps: Pick<IncidentsDeps, "sql" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IncidentsService>, "createMaintenanceWindow" | "listMaintenanceWindows" | "deleteMaintenanceWindow" | "endMaintenanceWindow"> {
  const { sql, clients, outbox } = deps;
  const columns = sql`id, starts_at, ends_at, reason, sources, entities`;

  return {
    async createMaintenanceWindow(req: CreateMaintenanceWindowRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const w = checkWindow(req);
      const [clock] = await sql<ClockRow[]>`select now() as now`;
      const now = clock!.now;
      // A window that is over before it exists suppresses nothing: almost surely a mistake
      // (a time zone, a swapped date), so it is refused rather than stored.
      if (w.endsAt.getTime() <= now.getTime()) throw new InvalidArgumentError("endsAt is in the past");
      const row: MaintenanceWindowRow = {
        id: randomUUID(),
        starts_at: w.startsAt,
        ends_at: w.endsAt,
        reason: w.reason,
        sources: w.sources,
        entities: w.entities,
      };
      const audit = outboxRows.audit({
        orgId: principal.orgId,
        kind: AUDIT_KINDS.maintenanceWindowCreated,
        actor: principal.email,
        at: now,
        data: auditData(row),
      });
      await sql`
        with created as (
          insert into incidents.maintenance_windows (id, org_id, starts_at, ends_at, reason, sources, entities, created_by)
          values (${row.id}, ${principal.orgId}, ${w.startsAt}, ${w.endsAt}, ${w.reason}, ${w.sources}::text[], ${sql.json(w.entities)}, ${principal.email})
          returning id
        )
        insert into incidents.outbox (subject, payload, trace_context) select ${audit.subject}::text, ${audit.payload}::bytea, ${currentTraceparent()}::text from created`;
      outbox.poke();
      return maintenanceWindowShape(row);
    },

    async listMaintenanceWindows(req: ListMaintenanceWindowsRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (!["", "current", "past"].includes(req.state)) throw new InvalidArgumentError("state must be current, past, or empty for every window");
      const stateClause = req.state === "current" ? sql`and ends_at > now()` : req.state === "past" ? sql`and ends_at <= now()` : sql``;
      const rows = await sql<MaintenanceWindowRow[]>`
        select ${columns} from incidents.maintenance_windows where org_id = ${principal.orgId} ${stateClause}
        order by starts_at desc, id desc limit ${MAINTENANCE_LIMITS.listed}`;
      return { maintenanceWindows: rows.map(maintenanceWindowShape) };
    },

    async deleteMaintenanceWindow(req: DeleteMaintenanceWindowRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      if (!isUuid(req.id)) throw new NotFoundError("no such maintenance window");
      // A window changes only by ending (its end moves earlier, never later), so the row read here is the row deleted below, and its fields
      // go into the audit record written by the deleting statement itself.
      const [found] = await sql<(MaintenanceWindowRow & ClockRow)[]>`
        select ${columns}, now() as now from incidents.maintenance_windows where id = ${req.id} and org_id = ${principal.orgId}`;
      if (!found) throw new NotFoundError("no such maintenance window");
      const audit = outboxRows.audit({
        orgId: principal.orgId,
        kind: AUDIT_KINDS.maintenanceWindowDeleted,
        actor: principal.email,
        at: found.now,
        data: auditData(found),
      });
      const deleted = await sql`
        with deleted as (
          delete from incidents.maintenance_windows where id = ${req.id} and org_id = ${principal.orgId} returning id
        ), events as (
          insert into incidents.outbox (subject, payload, trace_context) select ${audit.subject}::text, ${audit.payload}::bytea, ${currentTraceparent()}::text from deleted
        )
        select id from deleted`;
      if (deleted.length === 0) throw new NotFoundError("no such maintenance window");
      outbox.poke();
      return {};
    },

    async endMaintenanceWindow(req: EndMaintenanceWindowRequest, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      if (!isUuid(req.id)) throw new NotFoundError("no such maintenance window");
      const [found] = await sql<(MaintenanceWindowRow & ClockRow)[]>`
        select ${columns}, now() as now from incidents.maintenance_windows where id = ${req.id} and org_id = ${principal.orgId}`;
      if (!found) throw new NotFoundError("no such maintenance window");
      if (found.ends_at.getTime() <= found.now.getTime()) throw new FailedPreconditionError("the maintenance window has already ended");
      if (found.starts_at.getTime() > found.now.getTime()) {
        throw new FailedPreconditionError("the maintenance window has not started; delete it to cancel it");
      }
      const row: MaintenanceWindowRow = { ...found, ends_at: found.now };
      const audit = outboxRows.audit({
        orgId: principal.orgId,
        kind: AUDIT_KINDS.maintenanceWindowEnded,
        actor: principal.email,
        at: found.now,
        data: { ...auditData(row), plannedEndsAt: found.ends_at.toISOString() },
      });
      // Only while it is still active at the moment read above: a second end, or a delete in
      // between, changes nothing and is answered like the state it found.
      const ended = await sql`
        with ended as (
          update incidents.maintenance_windows set ends_at = ${found.now}
          where id = ${req.id} and org_id = ${principal.orgId} and starts_at <= ${found.now} and ends_at > ${found.now}
          returning id
        ), events as (
          insert into incidents.outbox (subject, payload, trace_context) select ${audit.subject}::text, ${audit.payload}::bytea, ${currentTraceparent()}::text from ended
        )
        select id from ended`;
      if (ended.length === 0) throw new FailedPreconditionError("the maintenance window has already ended");
      outbox.poke();
      return maintenanceWindowShape(row);
    },
  };
}
