import type { Migration } from "../runtime/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/outbox.js";

export const migrations: Migration[] = [
  {
    id: 1,
    name: "incidents, timelines, held event identifiers, maintenance windows",
    sql: `
      create table incidents.incidents (
        id uuid primary key default gen_random_uuid(),
        org_id uuid not null,
        title text not null,
        severity text not null check (severity in ('sev1', 'sev2', 'sev3', 'sev4')),
        state text not null default 'open' check (state in ('open', 'resolved', 'archived')),
        source text not null,
        entity_kind text,
        entity_id text,
        -- Null when the source gives none: such an incident is never found again by a delivery.
        attach_identity text,
        runbook_url text,
        opened_at timestamptz not null default clock_timestamp(),
        resolved_at timestamptz,
        resolved_by text,
        archived_at timestamptz,
        archived_by text
      );
      -- The heart of exactly-once: at most one open incident per attach identity and
      -- organization, whichever replica inserts first. Resolving or archiving takes the row out
      -- of the index, so the next delivery opens a new incident.
      create unique index incidents_one_open_per_identity on incidents.incidents (org_id, attach_identity) where state = 'open';
      create index incidents_org_newest on incidents.incidents (org_id, opened_at desc, id desc);
      create index incidents_org_state_newest on incidents.incidents (org_id, state, opened_at desc, id desc);

      -- Ordered by id: the order in which entries were recorded ('opened' is written in the
      -- transaction that creates the incident, so it is always first).
      create table incidents.timeline_entries (
        id bigserial primary key,
        incident_id uuid not null references incidents.incidents (id),
        kind text not null,
        at timestamptz not null default clock_timestamp(),
        summary text,
        link text,
        alert_ref text,
        event_id text,
        data jsonb
      );
      create index timeline_entries_incident on incidents.timeline_entries (incident_id, id);

      -- Event identifiers an incident holds: a redelivery of one is never recorded twice.
      create table incidents.held_event_ids (
        incident_id uuid not null references incidents.incidents (id),
        event_id text not null,
        primary key (incident_id, event_id)
      );

      create table incidents.maintenance_windows (
        id uuid primary key default gen_random_uuid(),
        org_id uuid not null,
        starts_at timestamptz not null,
        ends_at timestamptz not null,
        reason text not null,
        -- Empty: every source. Otherwise the source badges covered.
        sources text[] not null default '{}',
        -- Empty array: every entity. Otherwise [{"kind": ..., "id": ...}, ...], matched exactly.
        entities jsonb not null default '[]'::jsonb,
        created_by text not null,
        created_at timestamptz not null default now(),
        check (ends_at > starts_at)
      );
      create index maintenance_windows_org_ends on incidents.maintenance_windows (org_id, ends_at);
    `,
  },
  outboxMigration("incidents", 2),
  ...outboxUpgrades("incidents"),
];
