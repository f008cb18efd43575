import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { bearerToken } from "../runtime/auth.js";
import type { IngestTokenResolver } from "../runtime/ingest-token-cache.js";
import type { Sql } from "../runtime/database.js";
import { NotFoundError } from "../runtime/errors.js";
import type { SilenceDelivery } from "./silence-delivery.js";

const INGEST_TOKEN_FORMAT = /^[0-9a-f]{64}$/;
/** Matches no heartbeat: the update still runs when the token is not this organization's. */
const NO_ORGANIZATION = "00000000-0000-0000-0000-000000000000";

/** The one answer to every refused ping: nothing tells a wrong token from an unknown name. */
export const PING_REJECTION = "not found";

/**
 * The hot path: one database round trip. The ingest token resolves through the process's token
 * cache (identity is asked once per token, known or not), and one UPDATE records the ping. The
 * refusals (no token, wrong token, another organization's token, unknown name) run the same
 * UPDATE against no organization and end in the same NotFound, so neither the answer nor its
 * timing says which one it was.
 */
export function createPingHandler(deps: { sql: Sql; ingestTokens: IngestTokenResolver; delivery: SilenceDelivery }): Pick<ServiceImpl<typeof HeartbeatsService>, "ping"> {
  const { sql, ingestTokens, delivery } = deps;
  return {
    async ping(req, context: HandlerContext) {
      const token = bearerToken(context.requestHeader.get("authorization"));
      let orgId = NO_ORGANIZATION;
      if (token && INGEST_TOKEN_FORMAT.test(token)) {
        try {
          const org = await ingestTokens.resolve(token, context.signal);
          if (org.slug === req.org) orgId = org.id;
        } catch (err) {
          if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
        }
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
