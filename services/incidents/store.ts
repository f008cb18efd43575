import type { JsonObject } from "@bufbuild/protobuf";
import type { PendingQuery, Row } from "postgres";
import type { Sql } from "../runtime/data/database.js";

/** SQL fragments joined by commas, e.g. the rows of a VALUES list (at least one). */
export function commaSeparated(sql: Sql, fragments: PendingQuery<Row[]>[]): PendingQuery<Row[]> {
  let joined = fragments[0]!;
  for (const fragment of fragments.slice(1)) joined = sql`${joined}, ${fragment}`;
  return joined;
}

/** The incidents schema's rows, as the handlers read them. */

export interface IncidentRow {
  id: string;
  org_id: string;
  title: string;
  severity: string;
  state: string;
  source: string;
  entity_kind: string | null;
  entity_id: string | null;
  attach_identity: string | null;
  runbook_url: string | null;
  opened_at: Date;
  resolved_at: Date | null;
  archived_at: Date | null;
  acknowledged_at?: Date | null;
  acknowledged_by?: string | null;
  owner_id?: string | null;
  owner_email?: string | null;
  correlation_group_id?: string | null;
  /** Read by INCIDENT_READ (list-and-get.ts); Record's rows do not carry them. */
  repeat_count?: number;
  last_activity_at?: Date | null;
  recovered_at_source?: boolean;
  correlation_group_size?: number;
}

export interface TimelineEntryRow {
  kind: string;
  at: Date;
  summary: string | null;
  link: string | null;
  alert_ref: string | null;
  event_id: string | null;
  data: JsonObject | null;
}

export interface MaintenanceWindowRow {
  id: string;
  starts_at: Date;
  ends_at: Date;
  reason: string;
  sources: string[];
  entities: { kind: string; id: string }[];
}

/** A timeline entry with its id, the page cursor. */
export type TimelinePageRow = TimelineEntryRow & { id: string };

/** The database's clock: every time the incident core stores comes from it. */
export interface ClockRow {
  now: Date;
}

export interface IncidentIdRow {
  id: string;
}

export interface IncidentStateRow {
  state: string;
}

export interface MaintenanceWindowEndRow {
  now: Date;
  ends_at: Date | null;
}
