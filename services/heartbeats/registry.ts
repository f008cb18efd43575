import { create, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { decodeCursor, encodeCursor, pageLimit, pageOf } from "../runtime/page-cursor.js";
import { timestampFromDate, timestampNow } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { AuditRecordedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { HeartbeatSchema, HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import type { Principal } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/auth.js";
import type { Clients } from "../runtime/clients.js";
import type { Sql, TransactionSql } from "../runtime/database.js";
import { AlreadyExistsError, InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import type { Outbox } from "../runtime/outbox.js";
import { checkGrace, checkInterval, checkName } from "./heartbeat-rules.js";

export const AUDIT_KINDS = {
  registered: "heartbeat.registered",
  updated: "heartbeat.updated",
  deleted: "heartbeat.deleted",
} as const;

interface HeartbeatRow {
  name: string;
  expected_interval_seconds: number;
  grace_seconds: number;
  created_at: Date;
  last_seen_at: Date | null;
  deadline: Date;
  silent: boolean;
}

type HeartbeatInit = MessageInitShape<typeof HeartbeatSchema>;

function toHeartbeat(row: HeartbeatRow): HeartbeatInit {
  return {
    name: row.name,
    expectedIntervalSeconds: row.expected_interval_seconds,
    graceSeconds: row.grace_seconds,
    lastSeenAt: row.last_seen_at ? timestampFromDate(row.last_seen_at) : undefined,
    createdAt: timestampFromDate(row.created_at),
    dueAt: timestampFromDate(row.deadline),
    status: row.silent ? "silent" : "ok",
  };
}

function notFound(name: string): NotFoundError {
  return new NotFoundError(`no heartbeat named "${name}"`);
}

/** Register, list, read, update and delete: the management routes, for people. */
export function createRegistryHandlers(deps: {
  sql: Sql;
  clients: Clients;
  outbox: Outbox;
}): Pick<ServiceImpl<typeof HeartbeatsService>, "registerHeartbeat" | "listHeartbeats" | "getHeartbeat" | "updateHeartbeat" | "deleteHeartbeat"> {
  const { sql, clients, outbox } = deps;
  // "Silent" once a sweep has declared it, or as soon as the deadline is behind us.
  const columns = sql`name, expected_interval_seconds, grace_seconds, created_at, last_seen_at, deadline,
    (open_silence_id is not null or deadline < now()) as silent`;

  async function audit(tx: TransactionSql, principal: Principal, kind: string, data: JsonObject): Promise<void> {
    await outbox.write(
      tx,
      "events.audit.recorded",
      AuditRecordedSchema,
      create(AuditRecordedSchema, { orgId: principal.orgId, kind, actor: principal.email, at: timestampNow(), data }),
    );
  }

  return {
    async registerHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      checkName(req.name);
      const interval = checkInterval(req.expectedIntervalSeconds);
      const grace = checkGrace(req.graceSeconds);
      const row = await sql.begin(async (tx) => {
        const [inserted] = await tx<HeartbeatRow[]>`
          insert into heartbeats.heartbeats (org_id, org_slug, name, expected_interval_seconds, grace_seconds, deadline)
          values (${principal.orgId}, ${principal.orgSlug}, ${req.name}, ${interval}, ${grace}, now() + make_interval(secs => ${interval + grace}))
          on conflict (org_id, name) do nothing
          returning ${columns}`;
        if (!inserted) throw new AlreadyExistsError(`a heartbeat named "${req.name}" already exists`);
        await audit(tx, principal, AUDIT_KINDS.registered, { name: req.name, expectedIntervalSeconds: interval, graceSeconds: grace });
        return inserted;
      });
      outbox.poke();
      return toHeartbeat(row);
    },

    async listHeartbeats(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      // Paged by name, 1000 by default: an organization with a very large number of heartbeats
      // gets them a page at a time rather than as one reply over the internal message limit.
      const limit = pageLimit(req.limit, 1000, 10_000);
      const after = req.cursor ? decodeCursor("h", req.cursor, (v) => v.length > 0 && v.length <= 255) : undefined;
      const rows = await sql<HeartbeatRow[]>`
        select ${columns} from heartbeats.heartbeats where org_id = ${principal.orgId} ${after === undefined ? sql`` : sql`and name > ${after}`}
        order by name limit ${limit + 1}`;
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("h", last.name));
      return { heartbeats: page.map(toHeartbeat), ...(nextCursor ? { nextCursor } : {}) };
    },

    async getHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const [row] = await sql<HeartbeatRow[]>`
        select ${columns} from heartbeats.heartbeats where org_id = ${principal.orgId} and name = ${req.name}`;
      if (!row) throw notFound(req.name);
      return toHeartbeat(row);
    },

    async updateHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      // Over HTTP the path fills `heartbeat` and the body may carry `name`; a Connect caller may
      // name the heartbeat with either.
      const target = req.heartbeat || req.name;
      if (req.heartbeat && req.name && req.name !== req.heartbeat) {
        throw new InvalidArgumentError(
          `a heartbeat cannot be renamed (its name is fixed once registered): to use the name "${req.name}", delete "${req.heartbeat}" and register "${req.name}"`,
        );
      }
      if (req.expectedIntervalSeconds === undefined && req.graceSeconds === undefined) {
        throw new InvalidArgumentError("nothing to update: send expectedIntervalSeconds and/or graceSeconds");
      }
      const interval = req.expectedIntervalSeconds === undefined ? null : checkInterval(req.expectedIntervalSeconds);
      const grace = req.graceSeconds === undefined ? null : checkGrace(req.graceSeconds);
      const row = await sql.begin(async (tx) => {
        // The deadline moves with the new interval and grace. A silence in progress stays one
        // silence: only a ping ends it, so a longer interval never opens a second incident.
        const [updated] = await tx<HeartbeatRow[]>`
          update heartbeats.heartbeats set
            expected_interval_seconds = coalesce(${interval}::integer, expected_interval_seconds),
            grace_seconds = coalesce(${grace}::integer, grace_seconds),
            deadline = coalesce(last_seen_at, created_at)
              + make_interval(secs => coalesce(${interval}::integer, expected_interval_seconds) + coalesce(${grace}::integer, grace_seconds))
          where org_id = ${principal.orgId} and name = ${target}
          returning ${columns}`;
        if (!updated) throw notFound(target);
        await audit(tx, principal, AUDIT_KINDS.updated, {
          name: target,
          expectedIntervalSeconds: updated.expected_interval_seconds,
          graceSeconds: updated.grace_seconds,
        });
        return updated;
      });
      outbox.poke();
      return toHeartbeat(row);
    },

    async deleteHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      await sql.begin(async (tx) => {
        const deleted = await tx`delete from heartbeats.heartbeats where org_id = ${principal.orgId} and name = ${req.name} returning id`;
        if (deleted.length === 0) throw notFound(req.name);
        await audit(tx, principal, AUDIT_KINDS.deleted, { name: req.name });
      });
      outbox.poke();
      return {};
    },
  };
}
