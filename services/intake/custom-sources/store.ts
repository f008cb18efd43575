import type { JsonValue } from "@bufbuild/protobuf";
import type { Sql, TransactionSql } from "../../runtime/data/database.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import { AlreadyExistsError, FailedPreconditionError } from "../../runtime/errors.js";
import { type AuditRecord, recordAudit } from "../../runtime/transport/events.js";
import type { SignatureSettings, SourceAuth } from "./source-auth.js";

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

/** A source to create: its row's columns as an admin or a configuration file gives them. */
export interface NewCustomSource {
  id: string;
  orgId: string;
  orgSlug: string;
  name: string;
  rules: RuleJson[];
  auth: SourceAuth;
  preset: string;
  /** Kept as written; none: empty. */
  description?: string;
  credential: StoredCredential;
}

/** A credential as it is stored: its hash, and its sealed copy when the process could seal it. */
export interface StoredCredential {
  hash: Buffer;
  sealed: Buffer | null;
  sealedBy: string | null;
}

/** What an update of a source changes: its rules (as saved) and its auth options. */
export interface SourceChange {
  rules: RuleJson[];
  auth: SourceAuth;
  /** None: left as it is. */
  description?: string | undefined;
}

/** The refusal of a source past the organization's limit. */
export function sourcesFull(atMost: number): FailedPreconditionError {
  return new FailedPreconditionError(`an organization has at most ${atMost} custom sources`);
}

/** The refusal of a second source of one name in an organization. */
export function nameTaken(name: string): AlreadyExistsError {
  return new AlreadyExistsError(`a custom source named ${JSON.stringify(name)} already exists`);
}

/** The refusal of a sender's secret another source already has: each source needs its own. */
export function secretTaken(): AlreadyExistsError {
  return new AlreadyExistsError("secret: another custom source has this secret; give each source a secret of its own");
}

/**
 * The kept payloads and delivery log of the custom sources: what a delivery writes after its
 * answer (in groups, custom-source-delivery.ts) and what the admin routes read back.
 */
export interface DeliveryRecordStore {
  /**
   * The kept payloads and log rows of several deliveries. Each source's rows are rings: the
   * source's counters number its payloads and deliveries, and a record overwrites the slot of the
   * one KEPT_PAYLOADS (KEPT_DELIVERIES) before it, so only each source's newest are kept. A record
   * whose source was deleted meanwhile is left out.
   */
  keepAndLogMany(records: DeliveryRecord[]): Promise<void>;
  /** A source's kept payloads, the newest to arrive first. */
  payloads(sourceId: string): Promise<PayloadRow[]>;
  /** A kept payload by its number, while the source still keeps it. */
  payload(sourceId: string, seq: bigint): Promise<PayloadRow | undefined>;
  /** A source's delivery log, the newest to arrive first. */
  deliveries(sourceId: string): Promise<DeliveryLogRow[]>;
}

/**
 * What the custom-source routes and deliveries need from their tables. Every change writes its
 * audit record in the same transaction; a source's name is unique in its organization and a
 * current secret unique across every organization.
 */
export interface CustomSourceStore extends DeliveryRecordStore {
  /**
   * Creates a source and writes its audit record. Refuses (sourcesFull) when the organization has
   * `atMost` sources already, counted under a per-organization lock so concurrent creations
   * cannot both pass; refuses a name the organization has (nameTaken) and a secret another
   * source has (secretTaken).
   */
  create(source: NewCustomSource, atMost: number, audit: AuditRecord): Promise<CustomSourceRow>;
  /** The organization's sources, the oldest first. */
  list(orgId: string): Promise<CustomSourceRow[]>;
  get(orgId: string, id: string): Promise<CustomSourceRow | undefined>;
  /** The source a credential belongs to, when it is that source's current one. */
  byCredential(id: string, secretHash: Buffer): Promise<CustomSourceRow | undefined>;
  /** A source by id alone, while it has a credential: for a delivery that proves its secret by a header or a signature. */
  byId(id: string): Promise<CustomSourceRow | undefined>;
  /** Replaces the rules and auth options (the version moves on) and writes the audit record; undefined when there is no such source. */
  update(orgId: string, id: string, change: SourceChange, audit: AuditRecord): Promise<CustomSourceRow | undefined>;
  /** Deletes the source (its payloads and log with it) and writes the audit record. */
  delete(orgId: string, id: string, audit: AuditRecord): Promise<void>;
  /**
   * Replaces the credential (the old one matches nothing from the commit on) and writes the audit
   * record; refuses a secret another source has (secretTaken). Undefined when there is no such source.
   */
  rotate(orgId: string, id: string, credential: StoredCredential, audit: AuditRecord): Promise<CustomSourceRow | undefined>;
  /** Removes the credential: nothing authenticates as the source until it is rotated. Writes the audit record. */
  revoke(orgId: string, id: string, audit: AuditRecord): Promise<void>;
}

/** The `signature` column's value. */
export function signatureColumn(sql: Pick<Sql, "json">, auth: SourceAuth) {
  return auth.signature ? sql.json(auth.signature as unknown as JsonValue) : null;
}

/** A secret that another source already has (the unique index on the hash): refused as secretTaken. */
function secretInUse(err: unknown): never {
  if ((err as { code?: string; constraint_name?: string }).constraint_name === "custom_sources_secret") throw secretTaken();
  throw err;
}

/** The kept payloads and delivery log on Postgres. */
export function createDeliveryRecordStore(sql: Sql): DeliveryRecordStore {
  return {
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

/** The custom sources on Postgres; audit records go to `outbox` in the same transactions. */
export function createPostgresCustomSourceStore(sql: Sql, outbox: Outbox): CustomSourceStore {
  /** Runs a change and writes its audit record in one transaction. */
  const audited = <T>(audit: AuditRecord, work: (tx: TransactionSql) => Promise<T>): Promise<T> =>
    sql.begin(async (tx) => {
      const value = await work(tx);
      await recordAudit(outbox, tx, audit);
      return value;
    }) as Promise<T>;

  return {
    ...createDeliveryRecordStore(sql),

    async create(source, atMost, audit) {
      const { auth, credential } = source;
      return audited(audit, async (tx) => {
        // Serializes creations in one organization, so two replicas cannot both pass the count.
        await tx`select pg_advisory_xact_lock(hashtext(${`custom-sources:${source.orgId}`}))`;
        const [held] = await tx<{ count: number }[]>`select count(*)::int as count from intake.custom_sources where org_id = ${source.orgId}`;
        if (held!.count >= atMost) throw sourcesFull(atMost);
        const [existing] = await tx`select 1 from intake.custom_sources where org_id = ${source.orgId} and name = ${source.name}`;
        if (existing) throw nameTaken(source.name);
        const [inserted] = await tx<CustomSourceRow[]>`
          insert into intake.custom_sources (id, org_id, org_slug, name, rules, secret_in_path, basic_auth, secret_header, signature, preset,
                                             description, secret_hash, secret_sealed, secret_sealed_by, credential_issued_at)
          values (${source.id}, ${source.orgId}, ${source.orgSlug}, ${source.name}, ${tx.json(source.rules)}, ${auth.secretInPath},
                  ${auth.basicAuth}, ${auth.secretHeader}, ${signatureColumn(tx, auth)}, ${source.preset},
                  ${source.description ?? ""}, ${credential.hash}, ${credential.sealed}, ${credential.sealedBy}, now())
          returning *`;
        return inserted!;
      }).catch(secretInUse);
    },

    async list(orgId) {
      return sql<CustomSourceRow[]>`select * from intake.custom_sources where org_id = ${orgId} order by created_at, id`;
    },

    async get(orgId, id) {
      const [row] = await sql<CustomSourceRow[]>`select * from intake.custom_sources where org_id = ${orgId} and id = ${id}`;
      return row;
    },

    async byCredential(id, secretHash) {
      const [row] = await sql<CustomSourceRow[]>`select * from intake.custom_sources where id = ${id} and secret_hash = ${secretHash}`;
      return row;
    },

    async byId(id) {
      const [row] = await sql<CustomSourceRow[]>`select * from intake.custom_sources where id = ${id} and secret_hash is not null`;
      return row;
    },

    async update(orgId, id, change, audit) {
      const { auth } = change;
      return audited(audit, async (tx) => {
        const [updated] = await tx<CustomSourceRow[]>`
          update intake.custom_sources
          set rules = ${tx.json(change.rules)}, version = version + 1, secret_in_path = ${auth.secretInPath}, basic_auth = ${auth.basicAuth},
            secret_header = ${auth.secretHeader}, signature = ${signatureColumn(tx, auth)},
            description = coalesce(${change.description ?? null}::text, description)
          where org_id = ${orgId} and id = ${id}
          returning *`;
        // Thrown, so the audit record is not written either.
        if (!updated) throw new NoSuchSource();
        return updated;
      }).catch(noSuchSource);
    },

    async delete(orgId, id, audit) {
      await audited(audit, async (tx) => {
        await tx`delete from intake.custom_sources where org_id = ${orgId} and id = ${id}`;
      });
    },

    async rotate(orgId, id, credential, audit) {
      return audited(audit, async (tx) => {
        const [updated] = await tx<CustomSourceRow[]>`
          update intake.custom_sources set secret_hash = ${credential.hash}, secret_sealed = ${credential.sealed}, secret_sealed_by = ${credential.sealedBy},
            credential_issued_at = now()
          where org_id = ${orgId} and id = ${id} returning *`;
        if (!updated) throw new NoSuchSource();
        return updated;
      })
        .catch(secretInUse)
        .catch(noSuchSource);
    },

    async revoke(orgId, id, audit) {
      await audited(audit, async (tx) => {
        await tx`update intake.custom_sources set secret_hash = null, secret_sealed = null, secret_sealed_by = null where org_id = ${orgId} and id = ${id}`;
      });
    },
  };
}

/** A source gone between its read and its change: rolls the change back, answered as undefined. */
class NoSuchSource extends Error {}

function noSuchSource(err: unknown): undefined {
  if (err instanceof NoSuchSource) return undefined;
  throw err;
}
