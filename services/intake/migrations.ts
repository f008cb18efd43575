import type { Migration } from "../runtime/data/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/data/outbox.js";
import { customSourceMigrations } from "./custom-sources/migrations.js";

export const migrations: Migration[] = [
  {
    id: 1,
    name: "chat receiver rate windows",
    sql: `
      create table intake.chat_rate_windows (
        org_slug text not null,
        window_start timestamptz not null,
        calls integer not null,
        primary key (org_slug, window_start)
      );
    `,
  },
  outboxMigration("intake", 2),
  {
    id: 3,
    name: "retry keys of deliveries",
    sql: `
      -- One row per delivery retry key of an organization (retry-recognition.ts): claimed by the
      -- first delivery, answered once its work is done, held for a day.
      create table intake.retry_keys (
        org_id uuid not null,
        key text not null,
        token uuid not null,
        state text not null check (state in ('working', 'answered')),
        answer jsonb,
        claimed_until timestamptz not null,
        created_at timestamptz not null default now(),
        primary key (org_id, key)
      );
      create index retry_keys_created_at on intake.retry_keys (created_at);
    `,
  },
  {
    id: 4,
    name: "opsgenie request statuses",
    sql: `
      create table intake.opsgenie_requests (
        request_id uuid primary key,
        org_id uuid not null,
        action text not null,
        alias text not null default '',
        state text not null check (state in ('processing', 'processed')),
        outcome text,
        is_success boolean,
        status text,
        alert_id uuid,
        attach_identity text,
        created_at timestamptz not null default now(),
        processed_at timestamptz
      );
      create index opsgenie_requests_by_alert on intake.opsgenie_requests (org_id, alert_id, created_at desc) where alert_id is not null;
      create index opsgenie_requests_by_age on intake.opsgenie_requests (created_at);
    `,
  },
  {
    id: 5,
    name: "failed receiver authentications per client address",
    sql: `
      create table intake.receiver_failures (
        scope text not null,
        client_address text not null,
        window_start timestamptz not null,
        failures integer not null,
        primary key (scope, client_address, window_start)
      );
    `,
  },
  ...outboxUpgrades("intake"),
  ...customSourceMigrations,
  {
    id: 40,
    // When a delivery last used a grouping generation (refreshed at most daily), so the retention
    // sweep forgets generations nothing uses any more. The previous release leaves it at its default.
    name: "grouping generations: when last seen",
    sql: `
      alter table intake.grouping_generations add column seen_at timestamptz not null default now();
      create index grouping_generations_seen on intake.grouping_generations (seen_at);
    `,
  },
  {
    // Above custom sources' numbers, which go on from 34 in their own file.
    id: 41,
    name: "the body digest a retry key was first used with",
    sql: `
      -- An Idempotency-Key reused with another body is refused (422) rather than answered as a
      -- retry: the digest of the body that first claimed the key. Null for keys without one.
      alter table intake.retry_keys add column body_digest text;
    `,
  },
];
