import type { Migration } from "../runtime/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/outbox.js";

export const migrations: Migration[] = [
  {
    id: 1,
    name: "heartbeats and their silences",
    sql: `
      create table heartbeats.heartbeats (
        id uuid primary key default gen_random_uuid(),
        org_id uuid not null,
        -- Kept so that a sweep hands a silence to the incident core without asking identity.
        org_slug text not null,
        name text not null,
        expected_interval_seconds integer not null check (expected_interval_seconds > 0),
        grace_seconds integer not null check (grace_seconds >= 0),
        created_at timestamptz not null default now(),
        -- Only the latest ping is kept.
        last_seen_at timestamptz,
        -- coalesce(last_seen_at, created_at) + interval + grace, written by every statement that
        -- changes one of them, so that a sweep finds the overdue rows through an index.
        deadline timestamptz not null,
        -- The silence in progress, set by the sweep that detected it. Only a ping clears it: one
        -- silence, one incident, however long it lasts.
        open_silence_id uuid,
        -- A silence ended by a ping whose 'resumed' is not yet recorded on its incident, and when
        -- that ping came. Written by the ping itself, so a crash after the ping loses nothing.
        ended_silence_id uuid,
        silence_ended_at timestamptz,
        unique (org_id, name)
      );
      -- A sweep reads this index up to now(): its cost follows the overdue rows, not the
      -- registered ones.
      create index heartbeats_overdue on heartbeats.heartbeats (deadline) where open_silence_id is null;
      create index heartbeats_resume_pending on heartbeats.heartbeats (ended_silence_id) where ended_silence_id is not null;

      -- One row per silence: detected by a sweep, handed to the incident core (by that sweep or a
      -- later one), ended by a ping. The row id makes the event ids of its two deliveries.
      create table heartbeats.silences (
        id uuid primary key default gen_random_uuid(),
        heartbeat_id uuid not null references heartbeats.heartbeats (id) on delete cascade,
        -- The deadline that was crossed, and the last ping (or the registration) before it.
        deadline timestamptz not null,
        since timestamptz not null,
        never_pinged boolean not null,
        detected_at timestamptz not null default now(),
        alert_recorded_at timestamptz,
        alert_outcome text,
        incident_id text,
        resume_recorded_at timestamptz,
        resume_outcome text,
        -- Lease of the process delivering this silence; an expired lease is taken over and the
        -- delivery repeated with the same event id.
        claim_token uuid,
        claim_until timestamptz
      );
      create index silences_alert_pending on heartbeats.silences (detected_at) where alert_recorded_at is null;
      create index silences_heartbeat on heartbeats.silences (heartbeat_id);
      create index silences_done on heartbeats.silences (resume_recorded_at) where resume_recorded_at is not null;
    `,
  },
  outboxMigration("heartbeats", 2),
  ...outboxUpgrades("heartbeats"),
];
