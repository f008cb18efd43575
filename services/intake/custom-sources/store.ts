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

/** What a delivery leaves for admins to look at: its payload as kept, and its log row. */
export interface DeliveryRecord {
  sourceId: string;
  payload: { body: JsonValue; headers: Record<string, string>; query: Record<string, string>; truncated: boolean };
  entry: DeliveryLogEntry;
}

/** A log entry as the delivery log's columns. */
function logColumns(entry: DeliveryLogEntry) {
  return {
    outcome: entry.outcome,
    incident_id: entry.incidentId ?? null,
    rule: entry.rule ?? null,
    error: entry.error ?? null,
    warnings: entry.warnings,
    reason: entry.reason ?? null,
  };
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
     * The kept payloads and log rows of several deliveries in one statement, each source's payloads
     * trimmed to its newest KEPT_PAYLOADS (of a batch that brings more, only the newest are kept).
     * Rows another batch is dropping at the same moment are skipped, not waited for: two writers
     * that each waited for the other's rows deadlocked. One of them drops the row later.
     */
    async keepAndLogMany(records: DeliveryRecord[]): Promise<{ id: string; source_id: string }[]> {
      const logged = records.map((r) => ({ id: randomUUID(), source_id: r.sourceId, ...logColumns(r.entry) }));
      const newPayloads = new Map<string, number>();
      const payloads: Record<string, unknown>[] = [];
      // Newest first, so each source's newest KEPT_PAYLOADS are the ones kept; inserted oldest first.
      for (const r of [...records].reverse()) {
        const count = newPayloads.get(r.sourceId) ?? 0;
        newPayloads.set(r.sourceId, count + 1);
        if (count < KEPT_PAYLOADS) payloads.unshift({ id: randomUUID(), source_id: r.sourceId, ...r.payload });
      }
      const keepOld = [...newPayloads].map(([source_id, count]) => ({ source_id, keep: Math.max(0, KEPT_PAYLOADS - count) }));
      await sql`
        with kept as (
          insert into intake.custom_source_payloads (id, source_id, body, headers, query, truncated)
          select id, source_id, body, headers, query, truncated
          from jsonb_to_recordset(${sql.json(payloads as JsonValue)}) as p(id uuid, source_id uuid, body jsonb, headers jsonb, query jsonb, truncated boolean)
        ), trimmed as (
          delete from intake.custom_source_payloads where id in (
            select old.id from jsonb_to_recordset(${sql.json(keepOld)}) as t(source_id uuid, keep integer)
            cross join lateral (
              select id from intake.custom_source_payloads where source_id = t.source_id
              order by received_at desc, id desc offset t.keep
              for update skip locked
            ) as old
          )
        )
        insert into intake.custom_source_deliveries (id, source_id, outcome, incident_id, rule, error, warnings, reason)
        select id, source_id, outcome, incident_id, rule, error, warnings, reason
        from jsonb_to_recordset(${sql.json(logged)})
          as l(id uuid, source_id uuid, outcome text, incident_id uuid, rule text, error text, warnings text[], reason text)`;
      return logged;
    },

    /** Trims the delivery logs the rows just written fall due to trim (see trimLog). */
    async trimLogs(logged: { id: string; source_id: string }[]): Promise<void> {
      for (const row of logged) await trimLog(row.source_id, row.id);
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

    async deliveries(sourceId: string): Promise<DeliveryLogRow[]> {
      return sql<DeliveryLogRow[]>`
        select id, at, outcome, incident_id, rule, error, warnings, reason from intake.custom_source_deliveries
        where source_id = ${sourceId} order by at desc, id desc limit ${KEPT_DELIVERIES}`;
    },
  };
}

export type CustomSourceStore = ReturnType<typeof createCustomSourceStore>;
