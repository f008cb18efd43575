import type { AuditRecord } from "../../runtime/transport/events.js";
import type { CorrelationSettings } from "../correlation/correlation.js";
import type { SourceAuth } from "../custom-sources/source-auth.js";
import type { CustomSourceRow, DeliveryLogRow, PayloadRow, RuleJson } from "../custom-sources/store.js";
import type { OverrideRow } from "../grouping/store.js";

/** A source's kept payloads and log rows: rings of slots numbered by the source's counters. */
export interface MemoryRecords {
  payloadSeq: bigint;
  deliverySeq: bigint;
  payloads: Map<number, PayloadRow>;
  deliveries: Map<number, DeliveryLogRow>;
}

/**
 * Intake's tables for custom sources, grouping overrides and correlation, in memory, on a clock
 * the test moves: the rooms' memory stores (custom-sources/, grouping/, config-as-code/ testing/)
 * share one, as their Postgres stores share the tables.
 */
export interface MemoryTables {
  sources: CustomSourceRow[];
  records: Map<string, MemoryRecords>;
  overrides: (OverrideRow & { orgId: string })[];
  generations: Map<string, { generation: number; seenAt: Date }>;
  correlation: Map<string, CorrelationSettings>;
  /** Audit records in the order their changes committed. */
  audits: AuditRecord[];
  now(): Date;
  /** Moves the clock on. */
  advance(ms: number): void;
  /**
   * Runs `work` as a transaction: what it changed is undone when it throws. Every write of the
   * memory stores goes through it.
   */
  transaction<T>(work: () => T): T;
}

/** Empty tables whose clock starts at `start`; each write moves it on by a millisecond, as commits follow each other. */
export function createMemoryTables(start = new Date("2026-03-02T10:00:00Z")): MemoryTables {
  let clock = start.getTime();
  const tables: MemoryTables = {
    sources: [],
    records: new Map(),
    overrides: [],
    generations: new Map(),
    correlation: new Map(),
    audits: [],
    now: () => new Date(clock),
    advance(ms) {
      clock += ms;
    },
    transaction(work) {
      const saved = {
        sources: tables.sources.map((row) => ({ ...row })),
        overrides: tables.overrides.map((row) => ({ ...row })),
        generations: new Map(tables.generations),
        correlation: new Map(tables.correlation),
        audits: tables.audits.length,
        records: new Map(tables.records),
      };
      clock += 1;
      try {
        return work();
      } catch (err) {
        tables.sources = saved.sources;
        tables.overrides = saved.overrides;
        tables.generations = saved.generations;
        tables.correlation = saved.correlation;
        tables.audits.length = saved.audits;
        tables.records = saved.records;
        throw err;
      }
    },
  };
  return tables;
}

/** The columns a change of a source's rules and auth writes, as the Postgres stores' updates do. */
export function sourceChangeColumns(row: CustomSourceRow, rules: RuleJson[], auth: SourceAuth): Partial<CustomSourceRow> {
  return {
    rules: rules.map((rule) => ({ ...rule })),
    version: row.version + 1,
    secret_in_path: auth.secretInPath,
    basic_auth: auth.basicAuth,
    secret_header: auth.secretHeader,
    signature: auth.signature,
  };
}
