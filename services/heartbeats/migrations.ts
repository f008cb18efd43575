import type { Migration } from "../runtime/data/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/data/outbox.js";

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
  {
    id: 3,
    name: "schedules, signals, runs, what the job said, and pending resumes on the silence",
    sql: `
      -- A heartbeat follows an interval or a cron schedule, never both. The deadline stays the one
      -- stored, indexed column the sweep reads, whatever the kind.
      alter table heartbeats.heartbeats alter column expected_interval_seconds drop not null;
      alter table heartbeats.heartbeats
        add column schedule text,
        add column timezone text,
        -- An upper bound of the gap between two scheduled times: the deadline a ping writes in its
        -- own statement before the exact one is computed, so a crash in between is only late.
        add column schedule_gap_seconds integer,
        add column max_run_seconds integer check (max_run_seconds > 0),
        add column last_ping_at timestamptz,
        add column last_ping_kind text,
        add column last_ping_exit_status integer,
        add column last_ping_run_seconds float8,
        add column last_ping_body text,
        add column last_ping_body_cut boolean,
        add column last_ping_body_bytes integer,
        -- Pings so far: the history keeps the last 100 in slots ping_count % 100.
        add column ping_count bigint not null default 0,
        add constraint heartbeats_one_kind check ((expected_interval_seconds is null) <> (schedule is null));

      -- What a silence is about: 'silence' (no ping by the deadline), 'fail' (the job said it
      -- failed) or 'overrun' (a run started and did not end in time). The ping that ended it sets
      -- ended_at: every ended silence keeps its own pending resume, so a later silence never
      -- erases an earlier one's.
      alter table heartbeats.silences
        add column cause text not null default 'silence',
        add column ended_at timestamptz,
        -- A maintenance window suppressed the alert until this time; if the heartbeat is still
        -- silent then, the alert is delivered again.
        add column suppressed_until timestamptz,
        add column exit_status integer,
        add column body text,
        add column body_cut boolean,
        add column body_bytes integer,
        add column run_id uuid,
        add column suppressed_by text,
        -- What the ping that ended it said, for the 'resumed' entry.
        add column ended_body text,
        add column ended_body_cut boolean,
        add column ended_body_bytes integer,
        add column ended_run_seconds float8;
      update heartbeats.silences s set ended_at = h.silence_ended_at
        from heartbeats.heartbeats h where h.ended_silence_id = s.id;
      create index silences_resume_pending on heartbeats.silences (ended_at)
        where ended_at is not null and resume_recorded_at is null;
      create index silences_suppressed on heartbeats.silences (suppressed_until)
        where suppressed_until is not null;
      drop index heartbeats.heartbeats_resume_pending;
      alter table heartbeats.heartbeats drop column ended_silence_id, drop column silence_ended_at;

      -- Runs that started and have not ended. run_key is the run_id, or the nil UUID for runs
      -- without one (one such run at a time).
      create table heartbeats.runs (
        heartbeat_id uuid not null references heartbeats.heartbeats (id) on delete cascade,
        run_key uuid not null,
        started_at timestamptz not null,
        -- started_at + max_run_seconds; the sweep declares an overrun past it.
        overrun_at timestamptz,
        overrun_silence_id uuid,
        primary key (heartbeat_id, run_key)
      );
      create index runs_overdue on heartbeats.runs (overrun_at) where overrun_silence_id is null;

      -- The last 100 pings of each heartbeat, one slot each, overwritten in turn: bounded without
      -- any cleanup.
      create table heartbeats.pings (
        heartbeat_id uuid not null references heartbeats.heartbeats (id) on delete cascade,
        slot smallint not null,
        seq bigint not null,
        at timestamptz not null,
        kind text not null,
        run_id uuid,
        run_seconds float8,
        exit_status integer,
        client_address text not null,
        body_bytes integer not null,
        primary key (heartbeat_id, slot)
      );
    `,
  },
  ...outboxUpgrades("heartbeats"),
  {
    id: 4,
    name: "a ping key of its own per heartbeat, stored hashed and sealed",
    sql: `
      -- The SHA-256 of the heartbeat's ping key (what a ping by key is found by) and the key sealed
      -- under the secrets key (so the ping URL can be shown again), never the key itself. Rows
      -- registered before this get a key when the service starts.
      alter table heartbeats.heartbeats
        add column ping_key_hash text,
        add column ping_key_sealed bytea,
        add column ping_key_sealed_by text;
      create unique index heartbeats_ping_key on heartbeats.heartbeats (ping_key_hash);
    `,
  },
  {
    id: 5,
    name: "silences keep the last run, and a silence during an open failure or overrun",
    sql: `
      -- What the heartbeat last said when the silence was declared (the job's output is in
      -- body/body_cut/body_bytes/exit_status, as for a failure), and the start of a run that never
      -- finished. Read at detection, so a ping arriving before the delivery cannot change them.
      alter table heartbeats.silences
        add column last_kind text,
        add column last_ping_at timestamptz,
        add column last_run_seconds float8,
        add column unfinished_start timestamptz,
        -- A silence declared while a failure or an overrun was the heartbeat's open silence: that
        -- one's cause. The failure is then ended without a resume of its own (resume_outcome
        -- 'superseded'); the silence's own resume ends both on the one incident.
        add column during text;
      -- The last run that ended (a success or a failure), kept apart from the latest ping, which a
      -- later start replaces: a silence after a start that never finished still shows how the
      -- run before it ended and what it said.
      alter table heartbeats.heartbeats
        add column last_end_at timestamptz,
        add column last_end_kind text,
        add column last_end_exit_status integer,
        add column last_end_run_seconds float8,
        add column last_end_body text,
        add column last_end_body_cut boolean,
        add column last_end_body_bytes integer;
      update heartbeats.heartbeats set last_end_at = last_ping_at, last_end_kind = last_ping_kind,
        last_end_exit_status = last_ping_exit_status, last_end_run_seconds = last_ping_run_seconds,
        last_end_body = last_ping_body, last_end_body_cut = last_ping_body_cut, last_end_body_bytes = last_ping_body_bytes
        where last_ping_kind in ('success', 'fail');
      -- The failures and overruns still open: a sweep checks these heartbeats' deadlines too.
      create index silences_open_incidents on heartbeats.silences (heartbeat_id)
        where cause <> 'silence' and ended_at is null;
    `,
  },
  {
    id: 6,
    name: "runs that finish too quickly",
    sql: `
      -- A success ending a run sooner than this after its start is a failure of its own ('quick').
      alter table heartbeats.heartbeats add column min_run_seconds integer check (min_run_seconds > 0);
    `,
  },
  {
    id: 7,
    name: "the organization's ping key",
    sql: `
      -- One per organization, for ping URLs by name (/ping/{key}/{name}); only its hash is kept.
      create table heartbeats.org_ping_keys (
        org_id uuid primary key,
        org_slug text not null,
        key_hash text not null unique,
        allow_create boolean not null default false,
        issued_at timestamptz not null default now()
      );
    `,
  },
  {
    id: 8,
    name: "alert after N consecutive misses",
    sql: `
      -- How many expected pings in a row may be missed before the heartbeat is declared silent
      -- (1: the first miss). The deadline is the last of them plus grace, so the sweep reads it
      -- as before, on every replica alike.
      alter table heartbeats.heartbeats
        add column alert_after_misses integer not null default 1 check (alert_after_misses between 1 and 100);
    `,
  },
  {
    id: 9,
    name: "each kept ping keeps what the job said",
    sql: `
      -- The history's pings keep their body as the latest ping does (the first 10 KiB, as text),
      -- so every kept ping can be read with it: at most 100 per heartbeat, overwritten in turn.
      alter table heartbeats.pings add column body text, add column body_cut boolean;
    `,
  },
  {
    id: 10,
    name: "a heartbeat can be paused",
    sql: `
      -- Paused (an admin's PATCH, or a paused check imported from Healthchecks): no silence is
      -- declared until a ping or an admin resumes it. A paused heartbeat's deadline, and its
      -- runs' overrun times, are PAUSED_DEADLINE (far in the future), so every sweep, the previous
      -- release's too, passes it by. Expand only: the previous release ignores the column.
      alter table heartbeats.heartbeats add column paused_at timestamptz;
    `,
  },
];
