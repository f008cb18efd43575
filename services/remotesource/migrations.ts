import type { Migration } from "../runtime/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/outbox.js";

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
];
