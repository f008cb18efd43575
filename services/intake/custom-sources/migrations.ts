import type { Migration } from "../../runtime/data/migrations.js";

/** Custom sources' tables, in intake's schema (numbered apart from intake's own migrations). */
export const customSourceMigrations: Migration[] = [
  {
    id: 34,
    name: "custom sources, their last payloads and their delivery log",
    sql: `
      create table intake.custom_sources (
        id uuid primary key,
        org_id uuid not null,
        org_slug text not null,
        name text not null,
        rules jsonb not null,
        -- Bumped on every change of the rules, so a process knows its compiled copy is stale.
        version integer not null default 1,
        secret_in_path boolean not null default false,
        basic_auth boolean not null default false,
        preset text not null default '',
        -- SHA-256 of the credential; null once revoked.
        secret_hash bytea,
        credential_issued_at timestamptz,
        created_at timestamptz not null default now(),
        unique (org_id, name)
      );
      create unique index custom_sources_secret on intake.custom_sources (secret_hash) where secret_hash is not null;

      create table intake.custom_source_payloads (
        id uuid primary key,
        source_id uuid not null references intake.custom_sources (id) on delete cascade,
        received_at timestamptz not null default clock_timestamp(),
        body jsonb not null,
        headers jsonb not null,
        query jsonb not null,
        truncated boolean not null
      );
      create index custom_source_payloads_newest on intake.custom_source_payloads (source_id, received_at desc, id desc);

      create table intake.custom_source_deliveries (
        id uuid primary key,
        source_id uuid not null references intake.custom_sources (id) on delete cascade,
        at timestamptz not null default clock_timestamp(),
        outcome text not null,
        incident_id uuid,
        rule text,
        error text,
        warnings text[] not null default '{}',
        reason text
      );
      create index custom_source_deliveries_newest on intake.custom_source_deliveries (source_id, at desc, id desc);
    `,
  },
  {
    id: 35,
    name: "grouping overrides and their generations",
    sql: `
      create table intake.grouping_overrides (
        org_id uuid not null,
        source text not null,
        attach_key text not null default '',
        window_hours integer not null default 0,
        version integer not null default 1,
        primary key (org_id, source)
      );
      -- The current generation of an attach identity under a grouping window: a delivery that finds
      -- the generation's open incident older than the window moves to the next one, which opens anew.
      create table intake.grouping_generations (
        org_id uuid not null,
        identity text not null,
        generation integer not null,
        primary key (org_id, identity)
      );
    `,
  },
  {
    id: 36,
    name: "custom sources' kept payloads and delivery log as rings of slots",
    // A storm on one source inserted a row per delivery and deleted one: dead rows and index
    // entries that every trim walked again. Now each source has 50 payload slots and 500 log slots,
    // numbered by its own counters, and a delivery overwrites the oldest in place.
    sql: `
      alter table intake.custom_sources
        add column payload_seq bigint not null default 0,
        add column delivery_seq bigint not null default 0;

      alter table intake.custom_source_payloads rename to custom_source_payloads_old;
      alter index intake.custom_source_payloads_pkey rename to custom_source_payloads_old_pkey;
      create table intake.custom_source_payloads (
        source_id uuid not null references intake.custom_sources (id) on delete cascade,
        slot integer not null,
        -- The source's payload number: slot = seq % 50; the newest has the highest.
        seq bigint not null,
        received_at timestamptz not null,
        body jsonb not null,
        headers jsonb not null,
        query jsonb not null,
        truncated boolean not null,
        primary key (source_id, slot)
      );
      insert into intake.custom_source_payloads (source_id, slot, seq, received_at, body, headers, query, truncated)
      select source_id, (kept - newest) % 50, kept - newest, received_at, body, headers, query, truncated from (
        select *, row_number() over (partition by source_id order by received_at desc, id desc) as newest,
          least(count(*) over (partition by source_id), 50) as kept
        from intake.custom_source_payloads_old
      ) numbered where newest <= 50;
      drop table intake.custom_source_payloads_old;

      alter table intake.custom_source_deliveries rename to custom_source_deliveries_old;
      alter index intake.custom_source_deliveries_pkey rename to custom_source_deliveries_old_pkey;
      create table intake.custom_source_deliveries (
        source_id uuid not null references intake.custom_sources (id) on delete cascade,
        slot integer not null,
        -- The source's delivery number: slot = seq % 500; the newest has the highest.
        seq bigint not null,
        at timestamptz not null,
        outcome text not null,
        incident_id uuid,
        rule text,
        error text,
        warnings text[] not null default '{}',
        reason text,
        primary key (source_id, slot)
      );
      insert into intake.custom_source_deliveries (source_id, slot, seq, at, outcome, incident_id, rule, error, warnings, reason)
      select source_id, (kept - newest) % 500, kept - newest, at, outcome, incident_id, rule, error, warnings, reason from (
        select *, row_number() over (partition by source_id order by at desc, id desc) as newest,
          least(count(*) over (partition by source_id), 500) as kept
        from intake.custom_source_deliveries_old
      ) numbered where newest <= 500;
      drop table intake.custom_source_deliveries_old;

      update intake.custom_sources s set
        payload_seq = coalesce((select max(seq) + 1 from intake.custom_source_payloads p where p.source_id = s.id), 0),
        delivery_seq = coalesce((select max(seq) + 1 from intake.custom_source_deliveries d where d.source_id = s.id), 0);
    `,
  },
  {
    // After intake's own 40 and 41.
    id: 42,
    name: "custom sources: a secret header, a body signature, and the secret sealed",
    sql: `
      alter table intake.custom_sources
        -- The request header whose value is the secret (lowercase); '' for none.
        add column secret_header text not null default '',
        -- How the sender signs the raw body with the secret (source-auth.ts); null for none.
        add column signature jsonb,
        -- The secret sealed under SECRETS_KEYS, for checking signatures; null when issued before
        -- this, or where intake has no keys.
        add column secret_sealed bytea,
        add column secret_sealed_by text;
    `,
  },
  {
    id: 50,
    name: "correlation across sources: settings and the group of each key",
    // One settings row per organization that set correlation (none: nothing is correlated), and
    // one row per (organization, key) holding the key's current group. The upsert of that row is
    // what serializes concurrent alerts of a key across replicas (correlation.ts).
    sql: `
      create table intake.correlation_settings (
        org_id uuid primary key,
        mode text not null check (mode in ('link', 'attach')),
        window_minutes integer not null check (window_minutes > 0),
        key_expression text not null default '',
        version integer not null default 1
      );
      create table intake.correlation_groups (
        org_id uuid not null,
        key text not null,
        group_id uuid not null,
        last_alert_at timestamptz not null,
        primary key (org_id, key)
      );
      create index correlation_groups_last_alert on intake.correlation_groups (last_alert_at);
    `,
  },
  {
    id: 51,
    name: "custom sources: a description",
    sql: `
      -- What the source is for; an importer keeps there the original templates it translated.
      alter table intake.custom_sources add column description text not null default '';
    `,
  },
];
