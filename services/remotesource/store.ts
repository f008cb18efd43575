import type { SourceTransport } from "../remotesource-kit/client/source-client.js";

/** The remotesource schema's rows, as the handlers read them. */

/** A saved connection to a remote source; the credentials are sealed. */
export interface ConnectionRow {
  id: string;
  org_id: string;
  name: string;
  base_url: string;
  transport: SourceTransport;
  tenant_ref: string;
  key_id: string;
  credential_ciphertext: Buffer;
  status: "untested" | "connected" | "failed";
  last_error: string | null;
  last_tested_at: Date | null;
  revision: number;
  /** The investigation's reads (StoredRead[], see stored-reads.ts). */
  investigation_reads: unknown;
}

/** One investigation of an incident: run 1 when it opened, one more per re-run. */
export interface InvestigationRow {
  org_id: string;
  incident_id: string;
  run: number;
  state: "pending" | "running" | "done" | "skipped" | "failed";
  /** Why it was skipped or failed; while a run waits to be tried again, why its last attempt failed. */
  reason: string | null;
  /** Attempts claimed so far (see RUN_RETRY in investigation.ts). */
  attempts: number;
  runbook_url: string | null;
  requested_by: string;
  claimed_until: Date | null;
  created_at: Date;
  completed_at: Date | null;
}

/** One read's outcome, kept as evidence on the incident. */
export interface EvidenceRow {
  org_id: string;
  incident_id: string;
  run: number;
  read_key: string;
  position: number;
  connection_id: string;
  connection_name: string;
  read_name: string;
  call: string;
  operation: string;
  params: unknown;
  fetched_at: string;
  partial: boolean;
  error: string | null;
  series: unknown;
  entries: unknown;
  raw: string;
  raw_cut: boolean;
  from_ms: string | null;
  to_ms: string | null;
  recorded_at: Date;
}
