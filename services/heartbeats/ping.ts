import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { bearerToken } from "../runtime/auth.js";
import type { Clients } from "../runtime/clients.js";
import type { Sql } from "../runtime/database.js";
import { NotFoundError } from "../runtime/errors.js";
import type { SilenceDelivery } from "./silence-delivery.js";

/**
 * A well-formed token no organization holds. A missing or malformed token is looked up as this
 * one, so that identity does the same database lookup as for a real but wrong token.
 */
const UNMATCHABLE_TOKEN = "0".repeat(64);
const INGEST_TOKEN_FORMAT = /^[0-9a-f]{64}$/;
/** Matches no heartbeat: the update still runs when the token is not this organization's. */
const NO_ORGANIZATION = "00000000-0000-0000-0000-000000000000";

/** The one answer to every refused ping: nothing tells a wrong token from an unknown name. */
export const PING_REJECTION = "not found";

/**
 * The hot path. One identity call resolves the ingest token, one UPDATE records the ping. The
 * refusals (no token, wrong token, another organization's token, unknown name) do the same two
 * steps as a success and end in the same NotFound, so neither the answer nor its timing says
 * which one it was.
 */
export function createPingHandler(deps: { sql: Sql; clients: Clients; delivery: SilenceDelivery }): Pick<ServiceImpl<typeof HeartbeatsService>, "ping"> {
  const { sql, clients, delivery } = deps;
  return {
    async ping(req, context: HandlerContext) {
      const token = bearerToken(context.requestHeader.get("authorization"));
      const lookup = token && INGEST_TOKEN_FORMAT.test(token) ? token : UNMATCHABLE_TOKEN;
      let orgId = NO_ORGANIZATION;
      try {
        const org = await clients.identity.resolveIngestToken(
          { token: lookup },
          { headers: { "x-request-id": context.requestHeader.get("x-request-id") ?? "" }, signal: context.signal },
        );
        if (org.slug === req.org) orgId = org.id;
      } catch (err) {
        if (!(err instanceof ConnectError && err.code === Code.Unauthenticated)) throw err;
      }
      // Sets last-seen and the next deadline, and ends a silence in progress by moving it to
      // `ended_silence_id`: the pending `resumed` is durable in the same write. Repeating the
      // ping only moves last-seen forward.
      const [row] = await sql<{ ended_silence_id: string | null }[]>`
        update heartbeats.heartbeats set
          last_seen_at = now(),
          deadline = now() + make_interval(secs => expected_interval_seconds + grace_seconds),
          ended_silence_id = coalesce(open_silence_id, ended_silence_id),
          silence_ended_at = case when open_silence_id is not null then now() else silence_ended_at end,
          open_silence_id = null
        where org_id = ${orgId} and name = ${req.name}
        returning ended_silence_id`;
      if (!row) throw new NotFoundError(PING_REJECTION);
      if (row.ended_silence_id) delivery.resumeSoon(row.ended_silence_id);
      return {};
    },
  };
}
