import type { JsonValue } from "@bufbuild/protobuf";
import type { Sql, TransactionSql } from "../../runtime/data/database.js";
import type { SignatureSettings } from "./source-auth.js";

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
  description: string;
  secret_hash: Buffer | null;
  secret_header: string;
  signature: SignatureSettings | null;
  secret_sealed: Buffer | null;
  secret_sealed_by: string | null;
  credential_issued_at: Date | null;
  created_at: Date;
}

/** A rule as stored: the expression fields by their JSON names. */
export type RuleJson = Record<string, string>;

export interface PayloadRow {
  /** The source's payload number, its id in the API. */
  seq: string;
  received_at: Date;
  body: JsonValue;
  headers: Record<string, string>;
  query: Record<string, string>;
  truncated: boolean;
}

export interface DeliveryLogRow {
  /** The source's delivery number, its id in the API. */
  seq: string;
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
  /** When the delivery arrived: what the payload list and the log are ordered by. */
  receivedAt: Date;
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

    /** A source by id alone: for a delivery that proves its secret by a header or a signature. */
    async byId(id: string): Promise<CustomSourceRow | undefined> {
      const [row] = await sql<CustomSourceRow[]>`select * from intake.custom_sources where id = ${id} and secret_hash is not null`;
      return row;
    },

    /**
     * The kept payloads and log rows of several deliveries. Each source's rows are rings: the
     * source's counters number its payloads and deliveries, and a record overwrites the slot of the
     * one KEPT_PAYLOADS (KEPT_DELIVERIES) before it, in place, so a storm leaves no dead rows
     * behind. Of a batch that brings a source more payloads than it keeps, only the newest are
     * written. The sources' rows are locked in id order first, so two writers never deadlock; a
     * record whose source was deleted meanwhile is left out.
     */
    async keepAndLogMany(records: DeliveryRecord[]): Promise<void> {
      const bySource = new Map<string, DeliveryRecord[]>();
      for (const r of records) bySource.set(r.sourceId, [...(bySource.get(r.sourceId) ?? []), r]);
      const counts = [...bySource].map(([source_id, rs]) => ({ source_id, n: rs.length }));
      const payloads: Record<string, unknown>[] = [];
      const logged: Record<string, unknown>[] = [];
      for (const [source_id, rs] of bySource) {
        rs.forEach((r, ord) => {
          const at = r.receivedAt.toISOString();
          if (ord >= rs.length - KEPT_PAYLOADS) payloads.push({ source_id, ord, at, ...r.payload });
          if (ord >= rs.length - KEPT_DELIVERIES) logged.push({ source_id, ord, at, ...logColumns(r.entry) });
        });
      }
      await sql.begin(async (tx) => {
        await tx`select id from intake.custom_sources where id in (select (c->>'source_id')::uuid from jsonb_array_elements(${sql.json(counts)}) c) order by id for update`;
        await tx`
          with advanced as (
            update intake.custom_sources s set payload_seq = s.payload_seq + c.n, delivery_seq = s.delivery_seq + c.n
            from jsonb_to_recordset(${sql.json(counts)}) as c(source_id uuid, n integer)
            where s.id = c.source_id
            returning s.id, s.payload_seq - c.n as payload_base, s.delivery_seq - c.n as delivery_base
          ), kept as (
            insert into intake.custom_source_payloads (source_id, slot, seq, received_at, body, headers, query, truncated)
            select p.source_id, (a.payload_base + p.ord) % ${KEPT_PAYLOADS}, a.payload_base + p.ord, p.at, p.body, p.headers, p.query, p.truncated
            from jsonb_to_recordset(${sql.json(payloads as JsonValue)})
              as p(source_id uuid, ord integer, at timestamptz, body jsonb, headers jsonb, query jsonb, truncated boolean)
            join advanced a on a.id = p.source_id
            on conflict (source_id, slot) do update set seq = excluded.seq, received_at = excluded.received_at, body = excluded.body,
              headers = excluded.headers, query = excluded.query, truncated = excluded.truncated
          )
          insert into intake.custom_source_deliveries (source_id, slot, seq, at, outcome, incident_id, rule, error, warnings, reason)
          select l.source_id, (a.delivery_base + l.ord) % ${KEPT_DELIVERIES}, a.delivery_base + l.ord, l.at, l.outcome, l.incident_id, l.rule, l.error, l.warnings, l.reason
          from jsonb_to_recordset(${sql.json(logged as JsonValue)})
            as l(source_id uuid, ord integer, at timestamptz, outcome text, incident_id uuid, rule text, error text, warnings text[], reason text)
          join advanced a on a.id = l.source_id
          on conflict (source_id, slot) do update set seq = excluded.seq, at = excluded.at, outcome = excluded.outcome, incident_id = excluded.incident_id,
            rule = excluded.rule, error = excluded.error, warnings = excluded.warnings, reason = excluded.reason`;
      });
    },

    /**
     * A source's kept payloads, the newest to arrive first. Replicas write theirs a few
     * milliseconds apart, so the numbers (in the order written) may differ from the arrival order.
     */
    async payloads(sourceId: string): Promise<PayloadRow[]> {
      return sql<PayloadRow[]>`
        select seq, received_at, body, headers, query, truncated from intake.custom_source_payloads
        where source_id = ${sourceId} order by received_at desc, seq desc`;
    },

    /** A kept payload by its number, while the source still keeps it. */
    async payload(sourceId: string, seq: bigint): Promise<PayloadRow | undefined> {
      const [row] = await sql<PayloadRow[]>`
        select seq, received_at, body, headers, query, truncated from intake.custom_source_payloads
        where source_id = ${sourceId} and slot = ${Number(seq % BigInt(KEPT_PAYLOADS))} and seq = ${seq.toString()}`;
      return row;
    },

    /** A source's delivery log, the newest to arrive first (see payloads). */
    async deliveries(sourceId: string): Promise<DeliveryLogRow[]> {
      return sql<DeliveryLogRow[]>`
        select seq, at, outcome, incident_id, rule, error, warnings, reason from intake.custom_source_deliveries
        where source_id = ${sourceId} order by at desc, seq desc`;
    },
  };
}

export type CustomSourceStore = ReturnType<typeof createCustomSourceStore>;
