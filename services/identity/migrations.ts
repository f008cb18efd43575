import type { Migration } from "../runtime/data/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/data/outbox.js";

export const migrations: Migration[] = [
  {
    id: 1,
    name: "organizations, users, credentials, audit",
    sql: `
      create table identity.organizations (
        id uuid primary key default gen_random_uuid(),
        slug text not null unique,
        created_at timestamptz not null default now()
      );
      create table identity.users (
        id uuid primary key default gen_random_uuid(),
        email text not null,
        password_hash text not null,
        created_at timestamptz not null default now()
      );
      create unique index users_email on identity.users (lower(email));
      create table identity.memberships (
        org_id uuid not null references identity.organizations (id) on delete cascade,
        user_id uuid not null references identity.users (id) on delete cascade,
        role text not null check (role in ('owner', 'admin', 'member')),
        created_at timestamptz not null default now(),
        primary key (org_id, user_id)
      );
      create table identity.sessions (
        id uuid primary key default gen_random_uuid(),
        token_hash bytea not null unique,
        org_id uuid not null references identity.organizations (id) on delete cascade,
        user_id uuid not null references identity.users (id) on delete cascade,
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        revoked_at timestamptz
      );
      create table identity.api_keys (
        id uuid primary key default gen_random_uuid(),
        key_hash bytea not null unique,
        org_id uuid not null references identity.organizations (id) on delete cascade,
        user_id uuid not null references identity.users (id) on delete cascade,
        name text not null,
        created_at timestamptz not null default now(),
        revoked_at timestamptz
      );
      -- One live value per organization and kind; issuing again overwrites the hash, so the old
      -- value stops matching in the same commit.
      create table identity.org_credentials (
        org_id uuid not null references identity.organizations (id) on delete cascade,
        kind text not null check (kind in ('ingest_token', 'chat_secret', 'alertrouter_secret')),
        hash bytea not null unique,
        issued_at timestamptz not null default now(),
        issued_by uuid,
        primary key (org_id, kind)
      );
      create table identity.audit_events (
        id bigserial primary key,
        org_id uuid references identity.organizations (id) on delete cascade,
        kind text not null,
        actor text not null,
        at timestamptz not null default now(),
        data jsonb not null default '{}'::jsonb,
        source_event_id uuid unique
      );
      create index audit_events_org_at on identity.audit_events (org_id, at desc, id desc);
    `,
  },
  outboxMigration("identity", 2),
  {
    id: 3,
    name: "passwords belong to memberships",
    // Users are global, so a password on the user let one organization's admin choose the
    // password another organization's membership logs in with. Each membership now has its own;
    // existing memberships keep the password they logged in with until now.
    sql: `
      alter table identity.memberships add column password_hash text;
      update identity.memberships m set password_hash = u.password_hash from identity.users u where u.id = m.user_id;
      alter table identity.memberships alter column password_hash set not null;
      alter table identity.users alter column password_hash drop not null;
      update identity.users set password_hash = null;
    `,
  },
  {
    id: 4,
    name: "coalesced audit records",
    // Unauthenticated callers cause receiver.auth_failed records: one row per organization,
    // receiver, reason, client address and minute, with a count, so they cannot grow the table
    // faster than that.
    sql: `
      alter table identity.audit_events add column coalesce_key text;
      create unique index audit_events_coalesce_key on identity.audit_events (coalesce_key) where coalesce_key is not null;
    `,
  },
  {
    id: 5,
    name: "login throttle",
    // Failed logins per (organization, email) and per client address, shared by every replica.
    sql: `
      create table identity.login_failures (
        scope text not null check (scope in ('account', 'address')),
        key text not null,
        failures integer not null,
        last_failure_at timestamptz not null,
        locked_until timestamptz,
        primary key (scope, key)
      );
    `,
  },
  {
    id: 6,
    name: "API key last use, and a membership's credentials by member",
    // last_used_at is written at most once a minute per key (see sessions.ts). Removing a member
    // or setting a password revokes that membership's live sessions and keys in one statement.
    sql: `
      alter table identity.api_keys add column last_used_at timestamptz;
      create index sessions_live_by_member on identity.sessions (org_id, user_id) where revoked_at is null;
      create index api_keys_live_by_member on identity.api_keys (org_id, user_id) where revoked_at is null;
      `,
  },
  {
    id: 7,
    name: "login throttle per account and address pair",
    // Failures of one account from one address: the account's own lock then refuses only the
    // addresses that failed against it.
    sql: `
      alter table identity.login_failures drop constraint login_failures_scope_check;
      alter table identity.login_failures add constraint login_failures_scope_check check (scope in ('account', 'address', 'pair'));
    `,
  },
  {
    id: 8,
    name: "addresses each account has logged in from",
    // The second factor of evidence of the login throttle: a login from an address its account has
    // logged in from before is not refused by the account's own limit (see login-throttle.ts).
    sql: `
      create table identity.login_known_addresses (
        account text not null,
        address text not null,
        last_success_at timestamptz not null,
        primary key (account, address)
      );
      create index login_known_addresses_last_success on identity.login_known_addresses (last_success_at);
    `,
  },
  ...outboxUpgrades("identity"),
];
