import { randomUUID } from "node:crypto";
import type { JsonObject } from "@bufbuild/protobuf";
import type { Sql } from "../runtime/data/database.js";
import { recordAudit } from "../runtime/transport/events.js";
import type { Outbox } from "../runtime/data/outbox.js";

/**
 * Intake's own tables (see migrations.ts), behind one interface so the handlers can be tested
 * without a database. Each row type is declared here once.
 */

/** A retry key of `intake.retry_keys`, as a retry reads it. */
export interface RetryKeyRow {
  token: string;
  state: "working" | "answered";
  answer: JsonObject | null;
  /** The digest of the body that claimed the key, when its sender named the delivery. */
  body_digest: string | null;
}

/** The current minute of `intake.chat_rate_windows`: calls so far and the seconds left in it. */
export interface ChatWindowRow {
  calls: number;
  retry_after: number;
}

/** The current minute of `intake.receiver_failures`: failures so far and the seconds left in it. */
export interface ReceiverFailureRow {
  failures: number;
  retry_after: number;
}

/** A row of `intake.opsgenie_requests`, as the request-status route reads it. */
export interface OpsgenieRequestRow {
  action: string;
  alias: string;
  state: "processing" | "processed";
  outcome: string | null;
  is_success: boolean | null;
  status: string | null;
  alert_id: string | null;
  processed_at: Date | null;
}

/** What became of an Opsgenie request once it was acted on. */
export interface OpsgenieRequestResult {
  outcome: string;
  isSuccess: boolean;
  status: string;
  alertId: string | null;
  attachIdentity: string | null;
}

export interface RetryKeyStore {
  /**
   * Claims a key for a new delivery: a new key, an expired one (older than `holdSeconds`), or one
   * whose claim ran out while still working. Answers the claim's token, or undefined when the key
   * is held by another delivery. `bodyDigest` is kept with the key (see RetryKeyRow).
   */
  claim(orgId: string, key: string, times: { holdSeconds: number; leaseSeconds: number }, bodyDigest?: string): Promise<string | undefined>;
  /** Stores the answer of the claim that holds `token`. */
  answer(orgId: string, key: string, token: string, answer: JsonObject): Promise<void>;
  /** Drops the claim that holds `token`, so the next delivery of the key does the work. */
  release(orgId: string, key: string, token: string): Promise<void>;
  held(orgId: string, key: string): Promise<RetryKeyRow | undefined>;
  /** Deletes keys held longer than `holdSeconds` (a batch at a time); answers how many. */
  forgetExpired(holdSeconds: number): Promise<number>;
}

export interface ChatWindowStore {
  /** Counts a call to the organization's chat route in the current minute of the database clock. */
  countCall(orgSlug: string): Promise<ChatWindowRow>;
}

export interface ReceiverFailureStore {
  /** Counts one failure of this address on this scope in the current minute; answers the count with it. */
  add(scope: string, clientAddress: string): Promise<ReceiverFailureRow>;
}

export interface OpsgenieRequestStore {
  /** Stores that a request arrived, before it is acted on; drops statuses past `retentionDays`. */
  begin(request: { requestId: string; orgId: string; action: string; alias: string }, retentionDays: number): Promise<void>;
  finish(requestId: string, result: OpsgenieRequestResult): Promise<void>;
  /** The attach identity of the latest request that landed on this alert (incident) id. */
  attachIdentityOf(orgId: string, alertId: string): Promise<string | undefined>;
  find(orgId: string, requestId: string): Promise<OpsgenieRequestRow | undefined>;
}

export interface IntakeStore {
  retryKeys: RetryKeyStore;
  chatWindows: ChatWindowStore;
  receiverFailures: ReceiverFailureStore;
  opsgenieRequests: OpsgenieRequestStore;
  /** Writes an audit record through intake's outbox. */
  audit(orgId: string, kind: string, data: JsonObject): Promise<void>;
}

/** Windows older than this are deleted, at most once a minute per process. */
const WINDOW_CLEANUP_MS = 60_000;

/** Intake's tables in its Postgres schema; the audit record is written with intake's outbox. */
export function createPostgresIntakeStore(sql: Sql, outbox: Outbox): IntakeStore {
  let lastChatCleanup = 0;
  let lastFailureCleanup = 0;
  return {
    retryKeys: {
      async claim(orgId, key, { holdSeconds, leaseSeconds }, bodyDigest) {
        const token = randomUUID();
        // One statement: a new key is inserted; an expired one, or one whose claim ran out while
        // still working, is taken over; anything else is left to its holder.
        const rows = await sql<{ token: string }[]>`
          insert into intake.retry_keys as k (org_id, key, token, state, claimed_until, body_digest)
          values (${orgId}, ${key}, ${token}, 'working', now() + make_interval(secs => ${leaseSeconds}), ${bodyDigest ?? null})
          on conflict (org_id, key) do update
            set token = excluded.token, state = 'working', answer = null, claimed_until = excluded.claimed_until, created_at = now(),
                body_digest = excluded.body_digest
            where k.created_at < now() - make_interval(secs => ${holdSeconds})
               or (k.state = 'working' and k.claimed_until < now() and k.body_digest is not distinct from excluded.body_digest)
          returning token`;
        return rows[0]?.token;
      },
      async answer(orgId, key, token, answer) {
        await sql`
          update intake.retry_keys set state = 'answered', answer = ${sql.json(answer)}
          where org_id = ${orgId} and key = ${key} and token = ${token}`;
      },
      async release(orgId, key, token) {
        await sql`delete from intake.retry_keys where org_id = ${orgId} and key = ${key} and token = ${token}`;
      },
      async held(orgId, key) {
        const [row] = await sql<RetryKeyRow[]>`select token, state, answer, body_digest from intake.retry_keys where org_id = ${orgId} and key = ${key}`;
        return row;
      },
      async forgetExpired(holdSeconds) {
        const rows = await sql`
          delete from intake.retry_keys where (org_id, key) in (
            select org_id, key from intake.retry_keys where created_at < now() - make_interval(secs => ${holdSeconds}) limit 10000)`;
        return rows.count;
      },
    },

    chatWindows: {
      // A fixed one-minute window by the database clock, so every replica shares one count.
      async countCall(orgSlug) {
        const [row] = await sql<ChatWindowRow[]>`
          insert into intake.chat_rate_windows as w (org_slug, window_start, calls)
          values (${orgSlug}, date_trunc('minute', now()), 1)
          on conflict (org_slug, window_start) do update set calls = w.calls + 1
          returning w.calls, ceil(extract(epoch from (w.window_start + interval '1 minute' - now())))::int as retry_after`;
        if (Date.now() - lastChatCleanup > WINDOW_CLEANUP_MS) {
          lastChatCleanup = Date.now();
          void sql`delete from intake.chat_rate_windows where window_start < now() - interval '5 minutes'`.catch(() => {});
        }
        return row!;
      },
    },

    receiverFailures: {
      async add(scope, clientAddress) {
        // One statement, so concurrent failures on any replica each get their own count.
        const [row] = await sql<ReceiverFailureRow[]>`
          insert into intake.receiver_failures as f (scope, client_address, window_start, failures)
          values (${scope}, ${clientAddress}, date_trunc('minute', now()), 1)
          on conflict (scope, client_address, window_start) do update set failures = f.failures + 1
          returning f.failures, ceil(extract(epoch from (f.window_start + interval '1 minute' - now())))::int as retry_after`;
        if (Date.now() - lastFailureCleanup > WINDOW_CLEANUP_MS) {
          lastFailureCleanup = Date.now();
          void sql`delete from intake.receiver_failures where window_start < now() - interval '5 minutes'`.catch(() => {});
        }
        return row!;
      },
    },

    opsgenieRequests: {
      async begin({ requestId, orgId, action, alias }, retentionDays) {
        await sql`
          with expired as (
            delete from intake.opsgenie_requests where request_id in (
              select request_id from intake.opsgenie_requests
              where created_at < now() - make_interval(days => ${retentionDays}) limit 100)
          )
          insert into intake.opsgenie_requests (request_id, org_id, action, alias, state)
          values (${requestId}, ${orgId}, ${action}, ${alias}, 'processing')`;
      },
      async finish(requestId, { outcome, isSuccess, status, alertId, attachIdentity }) {
        await sql`
          update intake.opsgenie_requests
          set state = 'processed', outcome = ${outcome}, is_success = ${isSuccess}, status = ${status},
              alert_id = ${alertId}, attach_identity = ${attachIdentity}, processed_at = now()
          where request_id = ${requestId}`;
      },
      async attachIdentityOf(orgId, alertId) {
        const [row] = await sql<{ attach_identity: string }[]>`
          select attach_identity from intake.opsgenie_requests
          where org_id = ${orgId} and alert_id = ${alertId} and attach_identity is not null
          order by created_at desc limit 1`;
        return row?.attach_identity;
      },
      async find(orgId, requestId) {
        const [row] = await sql<OpsgenieRequestRow[]>`
          select action, alias, state, outcome, is_success, status, alert_id, processed_at
          from intake.opsgenie_requests where request_id = ${requestId} and org_id = ${orgId}`;
        return row;
      },
    },

    async audit(orgId, kind, data) {
      await sql.begin((tx) => recordAudit(outbox, tx, { orgId, kind, actor: "trigger", data }));
      outbox.poke();
    },
  };
}
