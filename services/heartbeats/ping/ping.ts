import { randomUUID } from "node:crypto";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { HeartbeatsService, KeyPingRequest, PingRequest } from "../../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { bearerToken } from "../../runtime/credentials/auth.js";
import type { IngestTokenResolver } from "../../runtime/credentials/ingest-token-cache.js";
import type { Sql } from "../../runtime/data/database.js";
import { InvalidArgumentError, NotFoundError } from "../../runtime/errors.js";
import { isUuid } from "../../runtime/ids.js";
import { REQUEST_ID_HEADER } from "../../runtime/http/request-context.js";
import type { Logger } from "../../runtime/observability/logger.js";
import { NAME_PATTERN } from "../../domain/heartbeat-rules.js";
import { createPingBatcher, type PingKind, type PingRow } from "./ping-batch.js";
import { keepBody } from "./ping-body.js";
import { createPingKeyOwners, hashPingKey, ORG_PING_KEY_FORMAT, PING_KEY_FORMAT } from "./ping-key.js";
import { expectedAfter } from "../../domain/schedule.js";
import type { SilenceDelivery } from "../silence-delivery.js";
import { NO_RUN_ID } from "../store.js";
import { noteForegroundWork } from "../../runtime/concurrency/background-yield.js";

const INGEST_TOKEN_FORMAT = /^[0-9a-f]{64}$/;
/** Matches no heartbeat: the update still runs when the token is not this organization's. */
const NO_ORGANIZATION = "00000000-0000-0000-0000-000000000000";

/** Opsgenie's answer to a heartbeat ping it took. */
export const OPSGENIE_PONG = "PONG - Heartbeat received";

/** The one answer to every refused ping: nothing tells a wrong token from an unknown name. */
export const PING_REJECTION = "not found";

interface Signal {
  kind: PingKind;
  exitStatus: number | null;
}

/**
 * "" (a plain ping) and "0" are success, "start" starts a run, "fail" and 1-255 are failures; "log"
 * (on ping URLs only, as Healthchecks has it) is kept in the history and changes nothing.
 */
export function parseSignal(signal: string, options: { log?: boolean } = {}): Signal | undefined {
  if (signal === "") return { kind: "success", exitStatus: null };
  if (signal === "log" && options.log) return { kind: "log", exitStatus: null };
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
  /** Registers a name on its first ping by the organization's ping key (`?create=1`). */
  provision: (org: { id: string; slug: string }, name: string) => Promise<boolean>;
}): Pick<ServiceImpl<typeof HeartbeatsService>, "ping" | "pingSignal" | "pingByKey" | "pingByKeySignal" | "pingOpsgenieHeartbeat"> {
  const { sql, ingestTokens, delivery, logger, provision } = deps;
  const batcher = createPingBatcher(sql);
  const keyOwners = createPingKeyOwners(sql);

  /**
   * A scheduled heartbeat's ping wrote a deadline one whole schedule gap away (never early); the
   * exact one, the next scheduled time after the ping, follows right after the answer. A crash
   * in between leaves the safe one. Only the ping that wrote it is corrected.
   */
  function exactDeadlineSoon(row: PingRow): void {
    // The last of the scheduled pings that may be missed in a row, plus grace.
    const expected = expectedAfter(row.seen, { interval: null, schedule: row.schedule, timezone: row.timezone }, row.alert_after_misses);
    const deadline = new Date(expected.getTime() + row.grace_seconds * 1000);
    delivery.track(
      sql`
        update heartbeats.heartbeats set deadline = ${deadline}
        where id = ${row.id} and last_seen_at = (${row.seen_at}::text)::timestamptz and open_silence_id is null and paused_at is null`.catch((err) =>
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
    const org = await organizationOf(bearerToken(context.requestHeader.get("authorization")), context);
    const orgId = org && org.slug === req.org ? org.id : NO_ORGANIZATION;
    // A name no heartbeat can have is looked up as "" (same work, no match): whatever the path
    // held (a NUL, a broken character) never reaches, and fails, a statement shared with others.
    const name = NAME_PATTERN.test(req.name) ? req.name : "";
    const row = await write({ orgId, name, keyHash: null }, req.body, runId, context, signal);
    if (!row) throw new NotFoundError(PING_REJECTION);
    return {};
  }

  /** The organization whose ingest token this is; undefined for a missing, malformed or unknown one. */
  async function organizationOf(token: string | undefined, context: HandlerContext): Promise<{ id: string; slug: string } | undefined> {
    if (!token || !INGEST_TOKEN_FORMAT.test(token)) return undefined;
    try {
      return await ingestTokens.resolve(token, context.signal);
    } catch (err) {
      if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
      return undefined;
    }
  }

  /** Records the ping, and after it what it set in motion (a resume, a failure, the exact deadline). */
  async function write(
    whose: { orgId: string; name: string; keyHash: string | null },
    bytes: Uint8Array,
    runId: string | null,
    context: HandlerContext,
    signal: Signal,
  ): Promise<PingRow | undefined> {
    noteForegroundWork();
    const body = keepBody(bytes);
    const client = (context.requestHeader.get("x-forwarded-for") ?? "").split(",")[0]!.trim();
    const { kind, exitStatus } = signal;
    const row = await batcher.write({ ...whose, kind, exitStatus, runKey: runId ?? NO_RUN_ID, runId, body, client });
    if (!row) return undefined;
    if (row.ended_silence_id) delivery.resumeSoon(row.ended_silence_id);
    if (row.failure_id) delivery.alertSoon(row.failure_id);
    if (row.schedule && kind !== "start" && kind !== "log") exactDeadlineSoon(row);
    return row;
  }

  /**
   * A ping on the heartbeat's own URL: the key is the credential. An unknown, malformed or rotated
   * key runs the same statement against no organization and ends in the same NotFound as every
   * refusal. The key itself goes nowhere but its hash: not into logs, errors or the statement.
   */
  async function recordByKey(req: KeyPingRequest, context: HandlerContext, signal: Signal): Promise<{ result: string }> {
    let runId: string | null = null;
    if (req.rid) {
      runId = req.rid.toLowerCase();
      if (!isUuid(runId)) throw new InvalidArgumentError("rid must be a UUID");
    }
    if (ORG_PING_KEY_FORMAT.test(req.key)) return recordByName(req, context, signal, runId);
    // A heartbeat's own key takes no name after it: the same refusal as any path that is not one.
    if (req.name) throw new NotFoundError(PING_REJECTION);
    const keyHash = hashPingKey(PING_KEY_FORMAT.test(req.key) ? req.key : "");
    const owner = PING_KEY_FORMAT.test(req.key) ? await keyOwners.owner(keyHash) : undefined;
    const row = await write({ orgId: owner?.orgId ?? NO_ORGANIZATION, name: owner?.name ?? "", keyHash }, req.body, runId, context, signal);
    if (!row) {
      if (owner) keyOwners.forget(keyHash);
      throw new NotFoundError(PING_REJECTION);
    }
    return { result: "OK" };
  }

  /**
   * A ping by the organization's ping key and a heartbeat's name. The key is looked up on every
   * ping (not remembered: a replaced key must stop at once, and nothing later re-checks it). An
   * unknown key and an unknown name are the same refusal; with `?create=1`, where the organization
   * allows it, an unknown name is registered (Healthchecks' defaults) and pinged.
   */
  async function recordByName(req: KeyPingRequest, context: HandlerContext, signal: Signal, runId: string | null): Promise<{ result: string }> {
    const [org] = await sql<{ org_id: string; org_slug: string; allow_create: boolean }[]>`
      select org_id, org_slug, allow_create from heartbeats.org_ping_keys where key_hash = ${hashPingKey(req.key)}`;
    const name = NAME_PATTERN.test(req.name) ? req.name : "";
    const whose = { orgId: org?.org_id ?? NO_ORGANIZATION, name, keyHash: null };
    let row = await write(whose, req.body, runId, context, signal);
    let created = false;
    if (!row && org && name && req.create && org.allow_create) {
      created = await provision({ id: org.org_id, slug: org.org_slug }, name);
      row = await write(whose, req.body, runId, context, signal);
    }
    if (!row) throw new NotFoundError(PING_REJECTION);
    return { result: created ? "Created" : "OK" };
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
    /**
     * Opsgenie's heartbeat ping: the organization is the GenieKey's (an ingest token), the name
     * the path's. A missing or unknown key and an unknown name are one identical refusal, as on
     * every ping route.
     */
    async pingOpsgenieHeartbeat(req, context: HandlerContext) {
      const started = performance.now();
      const genieKey = /^GenieKey\s+(\S+)\s*$/i.exec(context.requestHeader.get("authorization") ?? "")?.[1];
      const org = await organizationOf(genieKey, context);
      const name = NAME_PATTERN.test(req.name) ? req.name : "";
      const row = await write({ orgId: org?.id ?? NO_ORGANIZATION, name, keyHash: null }, req.body, null, context, { kind: "success", exitStatus: null });
      if (!row) throw new NotFoundError(PING_REJECTION);
      const requestId = context.requestHeader.get(REQUEST_ID_HEADER) ?? randomUUID();
      return { result: OPSGENIE_PONG, took: Math.round(performance.now() - started) / 1000, requestId };
    },
    async pingByKey(req, context: HandlerContext) {
      return recordByKey(req, context, { kind: "success", exitStatus: null });
    },
    async pingByKeySignal(req, context: HandlerContext) {
      // `/ping/{org key}/{name}`: the second segment is the name, and the signal is a plain ping.
      if (ORG_PING_KEY_FORMAT.test(req.key) && !req.name) {
        req.name = req.signal;
        req.signal = "";
      }
      const signal = parseSignal(req.signal, { log: true });
      if (!signal) throw new NotFoundError(PING_REJECTION);
      return recordByKey(req, context, signal);
    },
  };
}
