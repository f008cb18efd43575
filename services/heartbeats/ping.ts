import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { HeartbeatsService, PingRequest } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { bearerToken } from "../runtime/auth.js";
import type { IngestTokenResolver } from "../runtime/ingest-token-cache.js";
import type { Sql } from "../runtime/database.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import type { Logger } from "../runtime/logger.js";
import { NAME_PATTERN } from "./heartbeat-rules.js";
import { createPingBatcher, type PingKind, type PingRow } from "./ping-batch.js";
import { keepBody } from "./ping-body.js";
import { nextScheduled } from "./schedule.js";
import type { SilenceDelivery } from "./silence-delivery.js";

const INGEST_TOKEN_FORMAT = /^[0-9a-f]{64}$/;
/** Matches no heartbeat: the update still runs when the token is not this organization's. */
const NO_ORGANIZATION = "00000000-0000-0000-0000-000000000000";
/** The run key of a run without a run_id: one such run at a time per heartbeat. */
export const NO_RUN_ID = "00000000-0000-0000-0000-000000000000";

/** The one answer to every refused ping: nothing tells a wrong token from an unknown name. */
export const PING_REJECTION = "not found";

interface Signal {
  kind: PingKind;
  exitStatus: number | null;
}

/** "" (a plain ping) and "0" are success, "start" starts a run, "fail" and 1-255 are failures. */
export function parseSignal(signal: string): Signal | undefined {
  if (signal === "") return { kind: "success", exitStatus: null };
  if (signal === "start") return { kind: "start", exitStatus: null };
  if (signal === "fail") return { kind: "fail", exitStatus: null };
  if (/^\d{1,3}$/.test(signal)) {
    const status = Number(signal);
    if (status > 255) return undefined;
    return { kind: status === 0 ? "success" : "fail", exitStatus: status };
  }
  return undefined;
}

/**
 * The hot path: one database round trip. The ingest token resolves through the process's token
 * cache (identity is asked once per token, known or not), and one statement records the ping,
 * together with the pings that arrive meanwhile (`ping-batch.ts`). The refusals (no token, wrong
 * token, another organization's token, unknown name) run the same statement against no
 * organization and end in the same NotFound, so neither the answer nor its timing says which one
 * it was.
 */
export function createPingHandler(deps: {
  sql: Sql;
  ingestTokens: IngestTokenResolver;
  delivery: SilenceDelivery;
  logger: Logger;
}): Pick<ServiceImpl<typeof HeartbeatsService>, "ping" | "pingSignal"> {
  const { sql, ingestTokens, delivery, logger } = deps;
  const batcher = createPingBatcher(sql);

  /**
   * A scheduled heartbeat's ping wrote a deadline one whole schedule gap away (never early); the
   * exact one, the next scheduled time after the ping, follows right after the answer. A crash
   * in between leaves the safe one. Only the ping that wrote it is corrected.
   */
  function exactDeadlineSoon(row: PingRow): void {
    const deadline = new Date(nextScheduled(row.schedule!, row.timezone ?? "UTC", row.seen).getTime() + row.grace_seconds * 1000);
    delivery.track(
      sql`
        update heartbeats.heartbeats set deadline = ${deadline}
        where id = ${row.id} and last_seen_at = (${row.seen_at}::text)::timestamptz and open_silence_id is null`.catch((err) =>
        logger.warn({ err: String(err), heartbeat: row.id }, "could not write the exact deadline; the safe one stays"),
      ),
    );
  }

  async function record(req: PingRequest, context: HandlerContext, signal: Signal): Promise<Record<string, never>> {
    let runId: string | null = null;
    if (req.runId) {
      runId = req.runId.toLowerCase();
      if (!isUuid(runId)) throw new InvalidArgumentError("run_id must be a UUID");
    }
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
    const body = keepBody(req.body);
    const client = (context.requestHeader.get("x-forwarded-for") ?? "").split(",")[0]!.trim();
    const { kind, exitStatus } = signal;
    // A name no heartbeat can have is looked up as "" (same work, no match): whatever the path
    // held (a NUL, a broken character) never reaches, and fails, a statement shared with others.
    const name = NAME_PATTERN.test(req.name) ? req.name : "";
    const row = await batcher.write({ orgId, name, kind, exitStatus, runKey: runId ?? NO_RUN_ID, runId, body, client });
    if (!row) throw new NotFoundError(PING_REJECTION);
    if (row.ended_silence_id) delivery.resumeSoon(row.ended_silence_id);
    if (row.failure_id) delivery.alertSoon(row.failure_id);
    if (row.schedule && kind !== "start") exactDeadlineSoon(row);
    return {};
  }

  return {
    async ping(req, context: HandlerContext) {
      return record(req, context, { kind: "success", exitStatus: null });
    },
    async pingSignal(req, context: HandlerContext) {
      const signal = parseSignal(req.signal);
      // An unknown signal is a path that does not exist: the same answer as every refusal.
      if (!signal) throw new NotFoundError(PING_REJECTION);
      return record(req, context, signal);
    },
  };
}
