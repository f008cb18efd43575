import type { Migration } from "../runtime/data/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/data/outbox.js";

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
  {
    id: 3,
    name: "protobuf fields encoded in SQL, for events whose time or incident the writing statement decides",
    // Record decides attach-or-open and writes the events in one statement; the event's time
    // (the database clock) and, on attach, its incident id are known only inside it. The caller
    // encodes the rest of the message; these append the missing fields (protobuf accepts fields
    // in any order).
    sql: `
      -- A base-128 varint; a negative value as its 64-bit two's complement (ten bytes), as
      -- protobuf does: the first shift is made logical, after which the value is non-negative.
      create function incidents.pb_varint(value bigint) returns bytea
      language plpgsql immutable strict parallel safe as $$
      declare
        v bigint := value;
        encoded bytea := '\\x'::bytea;
        low int;
      begin
        loop
          low := (v & 127)::int;
          v := (v >> 7) & 144115188075855871;
          exit when v = 0;
          encoded := encoded || set_byte('\\x00'::bytea, 0, low | 128);
        end loop;
        return encoded || set_byte('\\x00'::bytea, 0, low);
      end $$;

      -- A string field: its tag, its length and its UTF-8 bytes. Fields 1 to 15 and strings
      -- under 128 bytes (an incident id) take one byte each for tag and length.
      create function incidents.pb_string_field(field int, value text) returns bytea
      language plpgsql immutable strict parallel safe as $$
      declare
        bytes bytea := convert_to(value, 'UTF8');
      begin
        if field between 1 and 15 and length(bytes) < 128 then
          return set_byte(set_byte('\\x0000'::bytea, 0, field * 8 + 2), 1, length(bytes)) || bytes;
        end if;
        return incidents.pb_varint(field * 8 + 2) || incidents.pb_varint(length(bytes)) || bytes;
      end $$;

      -- A google.protobuf.Timestamp field (1 to 15): whole seconds since the epoch (floor, so
      -- negative before 1970) and non-negative nanoseconds, zero values left out as encoders do.
      -- One function, bigint arithmetic only: it runs for every event a delivery writes.
      create function incidents.pb_timestamp_field(field int, at timestamptz) returns bytea
      language plpgsql immutable strict parallel safe as $$
      declare
        micros bigint := (extract(epoch from at) * 1000000)::bigint;
        seconds bigint := micros / 1000000;
        nanos bigint;
        v bigint;
        body bytea := '\\x'::bytea;
        low int;
      begin
        if field not between 1 and 15 then
          raise exception 'pb_timestamp_field: field % is not between 1 and 15', field;
        end if;
        if micros % 1000000 < 0 then
          seconds := seconds - 1;
        end if;
        nanos := (micros - seconds * 1000000) * 1000;
        if seconds <> 0 then
          body := '\\x08'::bytea;
          v := seconds;
          loop
            low := (v & 127)::int;
            v := (v >> 7) & 144115188075855871;
            exit when v = 0;
            body := body || set_byte('\\x00'::bytea, 0, low | 128);
          end loop;
          body := body || set_byte('\\x00'::bytea, 0, low);
        end if;
        if nanos <> 0 then
          body := body || '\\x10'::bytea;
          v := nanos;
          loop
            low := (v & 127)::int;
            v := v >> 7;
            exit when v = 0;
            body := body || set_byte('\\x00'::bytea, 0, low | 128);
          end loop;
          body := body || set_byte('\\x00'::bytea, 0, low);
        end if;
        return set_byte(set_byte('\\x0000'::bytea, 0, field * 8 + 2), 1, length(body)) || body;
      end $$;
    `,
  },
  {
    id: 4,
    name: "the open incident of an identity found through one index, whatever the statistics say",
    // A lookup by (org_id, attach_identity) and state = 'open' could be planned on the
    // (org_id, state, ...) index: with statistics taken while an organization's incidents were
    // mostly resolved, the planner believed it cheap, and every delivery of an alert storm read
    // every open incident of the organization. A column that holds the identity only while the
    // incident is open lets the lookup name no state at all, so only its unique index fits it.
    sql: `
      alter table incidents.incidents
        add column open_identity text generated always as (case when state = 'open' then attach_identity end) stored;
      create unique index incidents_one_open_identity on incidents.incidents (org_id, open_identity);
      drop index incidents.incidents_one_open_per_identity;
    `,
  },
  {
    id: 5,
    name: "the newest open incident of a source found through an index of its own",
    // FindLatestOpen (a PagerDuty change event) walked the organization's open incidents newest
    // first until one was of its source: in a storm of another source's incidents, all of them.
    sql: `create index incidents_open_by_source on incidents.incidents (org_id, source, opened_at desc, id desc) where state = 'open'`,
  },
  {
    id: 6,
    name: "event identifiers held by the timeline entries that recorded them",
    // A recorded delivery wrote its event identifier twice: in held_event_ids (a row, its primary
    // key and a foreign-key check) and in its timeline entry. The entry alone now holds it, through
    // this unique index. Every held identifier has its entry (both were always written together),
    // so nothing recorded before the upgrade is recorded again. held_event_ids is no longer
    // written; it stays for replicas of the previous release during a rolling upgrade (they still
    // write both, and this index keeps them from recording an identifier twice).
    sql: `create unique index timeline_entries_one_per_event on incidents.timeline_entries (incident_id, event_id) where event_id is not null`,
  },
  {
    id: 7,
    name: "the open incident of an identity found by a key no other index holds",
    // Record's statements keep one plan per connection (database.ts), made maybe while the table
    // is empty; then every index that starts with the organization looks as good as the
    // identity's unique one, and a plan that took one of them read every incident of the
    // organization for each delivery. The lookup names this key, which only this index holds.
    // Uniqueness stays with incidents_one_open_identity, the arbiter of the inserts. An
    // organization's id is 36 characters as text, so the key needs no separator.
    sql: `create index incidents_open_key on incidents.incidents ((org_id::text || open_identity)) where open_identity is not null`,
  },
  {
    id: 8,
    name: "a delivery's retry key kept with the incident it opened",
    // Intake stored a delivery's answer for its retries only after the incident core had
    // committed: a crash between the two left a retry free to open a second incident for an
    // error-tracker delivery (no attach identity). The key is now written by Record's own statement
    // with the incident, and this index is the arbiter among concurrent retries while the incident
    // is open. Adding a nullable column rewrites nothing; the index starts empty, but building it
    // reads the table while holding off writes, like migration 4.
    sql: `
      alter table incidents.incidents add column retry_key text;
      create unique index incidents_one_open_retry_key on incidents.incidents (org_id, retry_key) where retry_key is not null and state = 'open';
    `,
  },
  {
    id: 9,
    name: "a person's acknowledgement and the incident's owner",
    // Attributes of the incident, not states: Record's statements neither read nor write them, so
    // a repeat attaches as before and leaves them as they are. The owner is a member of the
    // organization (the identity service's id), with the email it had when assigned.
    sql: `
      alter table incidents.incidents
        add column acknowledged_at timestamptz,
        add column acknowledged_by text,
        add column owner_id uuid,
        add column owner_email text;
    `,
  },
  {
    id: 10,
    name: "timeline entries of one kind found through an index",
    // The list reads, for each incident, how many repeats it has and whether the source's latest
    // word was a recovery: the latest entry of a kind, and the count of a kind, of one incident.
    sql: `create index timeline_entries_incident_kind on incidents.timeline_entries (incident_id, kind, id)`,
  },
  {
    id: 11,
    name: "a delivery's retry key kept with the entry it wrote",
    // A delivery that outlived its caller's deadline (504) still committed its entry; the sender's
    // retry with the same Idempotency-Key then recorded a second repeat. The key is now written with
    // the entry (opened or repeat), so a retry finds it and is answered as the first one was. The
    // index is the arbiter among concurrent copies; it starts empty, like migration 8's.
    sql: `
      alter table incidents.timeline_entries add column retry_key text;
      create unique index timeline_entries_one_per_retry_key on incidents.timeline_entries (incident_id, retry_key) where retry_key is not null;
    `,
  },
  {
    id: 12,
    name: "correlation groups across sources",
    // Intake places a delivery of a correlated entity in a group (its own table decides which,
    // exactly once across replicas); the incident a delivery opens keeps the group it was given.
    // A nullable column rewrites nothing; the index holds only grouped incidents.
    sql: `
      alter table incidents.incidents add column correlation_group_id uuid;
      create index incidents_correlation_group on incidents.incidents (org_id, correlation_group_id) where correlation_group_id is not null;
    `,
  },
  {
    id: 14,
    name: "acknowledgement deadlines per severity, and each incident's passed steps held once",
    // The policy is read by the sweep at each turn, so a change applies to open incidents. A step
    // is claimed by inserting its row: the primary key lets exactly one replica (or one sweep
    // after a restart) write its event. outcome 'suppressed': a maintenance window covered the
    // incident at the deadline, so nothing was sent and nothing will be for that step; 'skipped': a
    // later step had passed too when the sweep came, and only the latest is sent.
    sql: `
      create table incidents.escalation_policies (
        org_id uuid not null,
        severity text not null check (severity in ('sev1', 'sev2', 'sev3', 'sev4')),
        minutes integer[] not null,
        updated_at timestamptz not null default now(),
        updated_by text not null,
        primary key (org_id, severity)
      );
      create table incidents.escalation_steps (
        incident_id uuid not null references incidents.incidents (id) on delete cascade,
        step integer not null,
        minutes integer not null,
        due_at timestamptz not null,
        outcome text not null check (outcome in ('emitted', 'suppressed', 'skipped')),
        maintenance_window_id uuid,
        recorded_at timestamptz not null default now(),
        primary key (incident_id, step)
      );
    `,
  },
  ...outboxUpgrades("incidents"),
];
