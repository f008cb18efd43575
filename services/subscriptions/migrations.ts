import type { Migration } from "../runtime/data/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/data/outbox.js";

export const migrations: Migration[] = [
  {
    id: 1,
    name: "subscriptions, their deliveries and every attempt",
    sql: `
      create table subscriptions.subscriptions (
        id uuid primary key default gen_random_uuid(),
        org_id uuid not null,
        -- For the workspace URLs in payloads: events carry the organization's id only.
        org_slug text not null,
        url text not null,
        events text[] not null,
        description text not null default '',
        state text not null default 'enabled' check (state in ('enabled', 'disabled')),
        disabled_reason text,
        disabled_at timestamptz,
        -- The signing secret, sealed with AES-256-GCM; the previous one signs beside it until
        -- previous_expires_at after a rotation.
        key_id text not null,
        secret_ciphertext bytea not null,
        previous_key_id text,
        previous_secret_ciphertext bytea,
        previous_expires_at timestamptz,
        -- Since when every attempt has failed; null while deliveries succeed.
        failing_since timestamptz,
        created_by text not null,
        created_at timestamptz not null default clock_timestamp(),
        updated_at timestamptz not null default now()
      );
      create index subscriptions_org on subscriptions.subscriptions (org_id, created_at);

      -- One row per event and subscription: its id is the webhook-id, the same on every attempt.
      create table subscriptions.deliveries (
        id text primary key,
        subscription_id uuid not null references subscriptions.subscriptions (id) on delete cascade,
        org_id uuid not null,
        -- The domain event (outbox id), or the test event's own id: the fan-out inserts once.
        event_id text not null,
        event_type text not null,
        payload text not null,
        state text not null default 'pending'
          check (state in ('pending', 'delivering', 'delivered', 'simulated', 'failed', 'cancelled')),
        attempt_count integer not null default 0,
        -- Retries are counted from here (the event, or the last redelivery a person asked for).
        window_start timestamptz not null default now(),
        -- Null once the delivery is settled (delivered, simulated, failed).
        next_attempt_at timestamptz default now(),
        -- A claim that outlives this was lost with its process: the delivery is due again.
        claimed_until timestamptz,
        -- The claim that may finish this attempt: a redelivery or a second claim after a lost
        -- lease replaces it, so a late answer to an older claim changes nothing.
        claim uuid,
        created_at timestamptz not null default now(),
        unique (subscription_id, event_id)
      );
      -- The claim's: each subscription's due deliveries, oldest first.
      create index deliveries_due on subscriptions.deliveries (subscription_id, next_attempt_at) where state in ('pending', 'delivering');
      create index deliveries_log on subscriptions.deliveries (subscription_id, created_at desc, id desc);
      -- The retention sweep's: settled deliveries, oldest first.
      create index deliveries_settled on subscriptions.deliveries (created_at) where state in ('delivered', 'simulated', 'failed', 'cancelled');

      create table subscriptions.attempts (
        id bigserial primary key,
        delivery_id text not null references subscriptions.deliveries (id) on delete cascade,
        at timestamptz not null default now(),
        status integer not null default 0,
        latency_ms integer not null default 0,
        response text not null default '',
        error text,
        outcome text not null check (outcome in ('delivered', 'failed', 'simulated', 'test'))
      );
      create index attempts_delivery on subscriptions.attempts (delivery_id, id desc);
    `,
  },
  outboxMigration("subscriptions", 2),
  {
    id: 3,
    // Every claim counts each subscription's attempts in flight. Read off deliveries_due, that
    // count visited every delivery waiting (a storm's thousands, or a down receiver's retries)
    // on each claim; this index holds only the few in flight.
    name: "deliveries in flight, for the claim's count",
    sql: `create index deliveries_in_flight on subscriptions.deliveries (subscription_id, claimed_until) where state = 'delivering'`,
  },
  {
    id: 4,
    // A storm's fan-out writes a row per event and subscription, and these two were a third of
    // each row's cost in Postgres: the foreign key's check ran once per row, and the unique index
    // only made the fan-out idempotent. The webhook-id is now derived from the subscription and
    // the event, so the primary key does that; the fan-out locks each subscription once per
    // statement (FOR KEY SHARE, as the check did) and a delete removes the deliveries itself.
    // Rows queued before this keep their random ids: an event queued then and handed to the
    // fan-out again after the upgrade (unacknowledged across it) is queued once more, under the
    // derived id.
    name: "deliveries without a per-row foreign key check or a second unique index",
    sql: `
      alter table subscriptions.deliveries
        drop constraint deliveries_subscription_id_fkey,
        drop constraint deliveries_subscription_id_event_id_key`,
  },
  ...outboxUpgrades("subscriptions"),
  {
    id: 5,
    // A redelivery a person asks for starts the retry schedule again: attempt_count stays the
    // delivery's total (the log shows it), and the schedule counts from the attempts before it.
    // The previous release neither reads nor writes it; its redeliveries count from 0 as before.
    name: "deliveries: the attempts made before the last redelivery",
    sql: `alter table subscriptions.deliveries add column attempts_before_window integer not null default 0`,
  },
];
