import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { Sql } from "../runtime/data/database.js";
import { NotFoundError } from "../runtime/errors.js";

interface PingHistoryRow {
  at: Date;
  kind: string;
  run_id: string | null;
  run_seconds: number | null;
  exit_status: number | null;
  client_address: string;
  body_bytes: number;
  body: string | null;
  body_cut: boolean | null;
}

/** The last 100 pings of a heartbeat, newest first, each with what the job said, for any member. */
export function createHistoryHandlers(deps: { sql: Sql; clients: Clients }): Pick<ServiceImpl<typeof HeartbeatsService>, "listPings"> {
  const { sql, clients } = deps;
  return {
    async listPings(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const rows = await sql<(PingHistoryRow & { found: boolean })[]>`
        select true as found, p.at, p.kind, p.run_id, p.run_seconds, p.exit_status, p.client_address, p.body_bytes, p.body, p.body_cut
        from heartbeats.heartbeats h left join heartbeats.pings p on p.heartbeat_id = h.id
        where h.org_id = ${principal.orgId} and h.name = ${req.name}
        order by p.seq desc nulls last`;
      if (rows.length === 0) throw new NotFoundError(`no heartbeat named "${req.name}"`);
      return {
        pings: rows
          .filter((r) => r.at !== null)
          .map((r) => ({
            at: timestampFromDate(r.at),
            kind: r.kind,
            runId: r.run_id ?? undefined,
            runSeconds: r.run_seconds ?? undefined,
            exitStatus: r.exit_status ?? undefined,
            clientAddress: r.client_address,
            bodyBytes: r.body_bytes,
            // Pings kept before bodies were kept in the history read as empty.
            body: r.body ?? "",
            bodyCut: r.body_cut ?? false,
          })),
      };
    },
  };
}
