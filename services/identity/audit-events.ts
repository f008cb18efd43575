import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, authorize } from "../runtime/credentials/auth.js";
import { InvalidArgumentError } from "../runtime/errors.js";
import { decodeCursor, encodeCursor, pageOf } from "../runtime/data/page-cursor.js";
import type { IdentityDeps } from "./deps.js";
import { type AuditEventRow, insertAuditEvent } from "./store.js";

/**
 * The organization's audit log: read by its admins (newest first, filtered by kind, kind prefix or
 * actor, in pages), written by the other services.
 */
export function createAuditEventHandlers(
  deps: Pick<IdentityDeps, "sql" | "clients">,
): Pick<ServiceImpl<typeof IdentityService>, "listAuditEvents" | "recordAudit"> {
  const { sql, clients } = deps;
  return {
    async listAuditEvents(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const limit = Math.min(Math.max(req.limit || 100, 1), 1000);
      const after = req.cursor ? decodeCursor("a", req.cursor, (v) => /^\d{1,19}$/.test(v)) : undefined;
      const afterClause =
        after === undefined
          ? sql``
          : sql`and (at, id) < (select at, id from identity.audit_events where org_id = ${principal.orgId} and id = ${after}::bigint)`;
      if (req.kind.length > 200) throw new InvalidArgumentError("kind must be at most 200 characters");
      if (req.actor.length > 320) throw new InvalidArgumentError("actor must be at most 320 characters");
      const kindClause = !req.kind ? sql`` : req.kind.endsWith(".") ? sql`and starts_with(kind, ${req.kind})` : sql`and kind = ${req.kind}`;
      const actorClause = req.actor ? sql`and actor = ${req.actor}` : sql``;
      const rows = await sql<AuditEventRow[]>`
        select id, kind, actor, at, data from identity.audit_events
        where org_id = ${principal.orgId} ${kindClause} ${actorClause} ${afterClause}
        order by at desc, id desc limit ${limit + 1}`;
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("a", String(last.id)));
      return { events: page.map((r) => ({ kind: r.kind, actor: r.actor, at: timestampFromDate(r.at), data: r.data })), ...(nextCursor ? { nextCursor } : {}) };
    },

    async recordAudit(req) {
      await sql.begin((tx) => insertAuditEvent(tx, req.orgId || null, req.kind, req.actor, req.data ?? {}));
      return {};
    },
  };
}
