import type { Migration } from "../runtime/data/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/data/outbox.js";

export const migrations: Migration[] = [
  {
    id: 1,
    name: "remote source connections",
    sql: `
      create table remotesource.connections (
        id uuid primary key,
        org_id uuid not null,
        name text not null,
        base_url text not null,
        transport text not null check (transport in ('http', 'grpc')),
        tenant_ref text not null,
        -- The credential (bearer token and/or client certificate, key and CA) is kept only as
        -- AES-256-GCM ciphertext of its JSON, with the id of the key that sealed it.
        key_id text not null,
        credential_ciphertext bytea not null,
        status text not null default 'untested' check (status in ('untested', 'connected', 'failed')),
        last_error text,
        last_tested_at timestamptz,
        -- Bumped whenever the target or the credential changes: a test or read that started
        -- before the change never writes its status over the newer settings.
        revision integer not null default 1,
        created_by text not null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        unique (org_id, name)
      );
      create index connections_org on remotesource.connections (org_id, created_at, id);
    `,
  },
  outboxMigration("remotesource", 2),
  ...outboxUpgrades("remotesource"),
  {
    id: 3,
    name: "investigation reads, investigations and their evidence",
    sql: `
      -- The reads an investigation makes through the connection (see investigation-reads.ts).
      alter table remotesource.connections add column investigation_reads jsonb not null default '[]';

      -- Run 1 is started by the incident's opening (a redelivered event finds it and adds none);
      -- a re-run from the room adds the next. A worker claims pending ones, and running ones
      -- whose claim lapsed (the process that held it stopped).
      create table remotesource.investigations (
        org_id uuid not null,
        incident_id uuid not null,
        run integer not null,
        state text not null default 'pending' check (state in ('pending', 'running', 'done', 'skipped')),
        reason text,
        runbook_url text,
        requested_by text not null,
        claimed_until timestamptz,
        created_at timestamptz not null default now(),
        completed_at timestamptz,
        primary key (org_id, incident_id, run)
      );
      create index investigations_due on remotesource.investigations (created_at) where state in ('pending', 'running');

      -- One row per read of a run: a redelivery or a resumed run never records a read twice.
      -- Kept when the connection is deleted (its name is copied).
      create table remotesource.evidence (
        org_id uuid not null,
        incident_id uuid not null,
        run integer not null,
        read_key text not null,
        position integer not null,
        connection_id uuid not null,
        connection_name text not null,
        read_name text not null,
        call text not null,
        operation text not null,
        params jsonb,
        fetched_at text not null,
        partial boolean not null,
        error text,
        series jsonb,
        entries jsonb,
        raw text not null,
        raw_cut boolean not null,
        from_ms bigint,
        to_ms bigint,
        recorded_at timestamptz not null default now(),
        primary key (org_id, incident_id, run, read_key)
      );
    `,
  },
  {
    id: 4,
    // A run that keeps failing on the way stops after its attempts as 'failed', with the reason.
    // Additive for the previous release: it never writes 'failed', leaves attempts at 0, and its
    // claim does not pick a failed run.
    name: "investigations: attempts, and a failed state",
    sql: `
      -- compatible: the state check is replaced by a wider one in the same statement; the previous
      -- release (0.1.0) writes only states both allow.
      alter table remotesource.investigations add column attempts integer not null default 0;
      alter table remotesource.investigations drop constraint investigations_state_check,
        add constraint investigations_state_check check (state in ('pending', 'running', 'done', 'skipped', 'failed'));
    `,
  },
  {
    id: 5,
    name: "indexes for the retention sweep",
    // The sweep picks evidence by age and settled runs by completion, a batch at a time.
    sql: `
      create index evidence_recorded on remotesource.evidence (recorded_at);
      create index investigations_settled on remotesource.investigations (completed_at) where state in ('done', 'skipped', 'failed');
    `,
  },
];
