import { randomUUID } from "node:crypto";
import type { JsonValue } from "@bufbuild/protobuf";
import type { Sql, TransactionSql } from "../../runtime/database.js";

/** A row of `intake.custom_sources`. `rules` is the rules' JSON as saved. */
export interface CustomSourceRow {
  id: string;
  org_id: string;
  org_slug: string;
  name: string;
  rules: RuleJson[];
  version: number;
  secret_in_path: boolean;
  basic_auth: boolean;
  preset: string;
  secret_hash: Buffer | null;
  credential_issued_at: Date | null;
  created_at: Date;
}

/** A rule as stored: the expression fields by their JSON names. */
export type RuleJson = Record<string, string>;

export interface PayloadRow {
  id: string;
  received_at: Date;
  body: JsonValue;
  headers: Record<string, string>;
  query: Record<string, string>;
  truncated: boolean;
}

export interface DeliveryLogRow {
  id: string;
  at: Date;
  outcome: string;
  incident_id: string | null;
  rule: string | null;
  error: string | null;
  warnings: string[];
  reason: string | null;
}

/** How many payloads each source keeps, and how many delivery-log rows. */
export const KEPT_PAYLOADS = 50;
export const KEPT_DELIVERIES = 500;
export const SOURCES_PER_ORG = 50;

/** The SQL of the custom-source tables. */
/** One row of a source's delivery log. */
export interface DeliveryLogEntry {
  outcome: string;
  incidentId?: string | undefined;
  rule?: string | undefined;
  error?: string | undefined;
  warnings: string[];
  reason?: string | undefined;
}

export function createCustomSourceStore(sql: Sql) {
  /** Bounded without a sweep: every fiftieth delivery (by its random id) trims the log. */
  async function trimLog(sourceId: string, id: string): Promise<void> {
    if (!(id.endsWith("0") && /[0-3]$/.test(id.slice(-2, -1)))) return;
    await sql`
      delete from intake.custom_source_deliveries where source_id = ${sourceId} and id in (
        select id from intake.custom_source_deliveries where source_id = ${sourceId} order by at desc, id desc offset ${KEPT_DELIVERIES}
        for update skip locked
      )`;
  }

  return {
    sql,

    /** Serializes creations in one organization, so two replicas cannot both pass the count. */
    async lockOrg(tx: TransactionSql, orgId: string): Promise<number> {
      await tx`select pg_advisory_xact_lock(hashtext(${`custom-sources:${orgId}`}))`;
      const [row] = await tx<{ count: number }[]>`select count(*)::int as count from intake.custom_sources where org_id = ${orgId}`;
      return row!.count;
    },

    async list(orgId: string): Promise<CustomSourceRow[]> {
      return sql<CustomSourceRow[]>`select * from intake.custom_sources where org_id = ${orgId} order by created_at, id`;
    },

    async get(orgId: string, id: string): Promise<CustomSourceRow | undefined> {
      const [row] = await sql<CustomSourceRow[]>`select * from intake.custom_sources where org_id = ${orgId} and id = ${id}`;
      return row;
    },

    /** The source a credential belongs to, when it is that source's current one. */
    async byCredential(id: string, secretHash: Buffer): Promise<CustomSourceRow | undefined> {
      const [row] = await sql<CustomSourceRow[]>`select * from intake.custom_sources where id = ${id} and secret_hash = ${secretHash}`;
      return row;
    },

    /**
     * Keeps a payload and drops those beyond the newest KEPT_PAYLOADS, in one statement. Rows
     * another delivery is dropping at the same moment are skipped, not waited for: two deliveries
     * that each waited for the other's rows deadlocked. One of them drops the row later.
     */
    async keepPayload(
      sourceId: string,
      payload: { body: JsonValue; headers: Record<string, string>; query: Record<string, string>; truncated: boolean },
    ): Promise<void> {
      await sql`
        with kept as (
          insert into intake.custom_source_payloads (id, source_id, body, headers, query, truncated)
          values (${randomUUID()}, ${sourceId}, ${sql.json(payload.body)}, ${sql.json(payload.headers)}, ${sql.json(payload.query)}, ${payload.truncated})
          returning id
        )
        delete from intake.custom_source_payloads
        where source_id = ${sourceId} and id in (
          select id from intake.custom_source_payloads where source_id = ${sourceId}
          order by received_at desc, id desc offset ${KEPT_PAYLOADS - 1}
          for update skip locked
        )`;
    },

    /**
     * A delivery's kept payload and its log row in one statement (one round trip on the delivery
     * path instead of two), with the payloads trimmed as keepPayload does.
     */
    async keepAndLog(
      sourceId: string,
      payload: { body: JsonValue; headers: Record<string, string>; query: Record<string, string>; truncated: boolean },
      entry: DeliveryLogEntry,
    ): Promise<void> {
      const id = randomUUID();
      await sql`
        with kept as (
          insert into intake.custom_source_payloads (id, source_id, body, headers, query, truncated)
          values (${randomUUID()}, ${sourceId}, ${sql.json(payload.body)}, ${sql.json(payload.headers)}, ${sql.json(payload.query)}, ${payload.truncated})
          returning id
        ), trimmed as (
          delete from intake.custom_source_payloads
          where source_id = ${sourceId} and id in (
            select id from intake.custom_source_payloads where source_id = ${sourceId}
            order by received_at desc, id desc offset ${KEPT_PAYLOADS - 1}
            for update skip locked
          )
        )
        insert into intake.custom_source_deliveries (id, source_id, outcome, incident_id, rule, error, warnings, reason)
        values (${id}, ${sourceId}, ${entry.outcome}, ${entry.incidentId ?? null}, ${entry.rule ?? null}, ${entry.error ?? null}, ${entry.warnings}, ${entry.reason ?? null})`;
      await trimLog(sourceId, id);
    },

    async payloads(sourceId: string): Promise<PayloadRow[]> {
      return sql<PayloadRow[]>`
        select id, received_at, body, headers, query, truncated from intake.custom_source_payloads
        where source_id = ${sourceId} order by received_at desc, id desc limit ${KEPT_PAYLOADS}`;
    },

    async payload(sourceId: string, id: string): Promise<PayloadRow | undefined> {
      const [row] = await sql<PayloadRow[]>`
        select id, received_at, body, headers, query, truncated from intake.custom_source_payloads where source_id = ${sourceId} and id = ${id}`;
      return row;
    },

    async logDelivery(sourceId: string, entry: DeliveryLogEntry): Promise<void> {
      const id = randomUUID();
      await sql`
        insert into intake.custom_source_deliveries (id, source_id, outcome, incident_id, rule, error, warnings, reason)
        values (${id}, ${sourceId}, ${entry.outcome}, ${entry.incidentId ?? null}, ${entry.rule ?? null}, ${entry.error ?? null}, ${entry.warnings}, ${entry.reason ?? null})`;
      await trimLog(sourceId, id);
    },

    async deliveries(sourceId: string): Promise<DeliveryLogRow[]> {
      return sql<DeliveryLogRow[]>`
        select id, at, outcome, incident_id, rule, error, warnings, reason from intake.custom_source_deliveries
        where source_id = ${sourceId} order by at desc, id desc limit ${KEPT_DELIVERIES}`;
    },
  };
}

export type CustomSourceStore = ReturnType<typeof createCustomSourceStore>;
