import type { Migration } from "../runtime/data/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/data/outbox.js";

export const migrations: Migration[] = [
  {
    id: 1,
    name: "egress switch, chat-webhook connections, messages",
    sql: `
      -- No row: egress off, the default for every organization.
      create table comms.egress_settings (
        org_id uuid primary key,
        enabled boolean not null,
        changed_by text not null,
        changed_at timestamptz not null default now()
      );

      -- The webhook URL is a credential: only its AES-256-GCM ciphertext is kept, with the id of
      -- the key that sealed it so keys can rotate.
      create table comms.chat_connections (
        org_id uuid not null,
        name text not null check (name = 'default'),
        key_id text not null,
        url_ciphertext bytea not null,
        saved_by text not null,
        saved_at timestamptz not null default now(),
        primary key (org_id, name)
      );

      create table comms.messages (
        id uuid primary key default gen_random_uuid(),
        org_id uuid not null,
        incident_id text not null,
        channel text not null,
        label text,
        body text not null,
        -- sending: claimed by one send call, outcome not yet known. A message leaves 'approved'
        -- exactly once, through one conditional update.
        state text not null default 'drafted'
          check (state in ('drafted', 'approved', 'sending', 'sent', 'simulated', 'failed')),
        version integer not null default 1,
        -- person: drafted through the API; war_room_link: offered when a chat message opened the incident.
        origin text not null default 'person' check (origin in ('person', 'war_room_link')),
        drafted_by text not null,
        drafted_at timestamptz not null default now(),
        approved_by text,
        approved_at timestamptz,
        sent_by text,
        claimed_at timestamptz,
        finished_at timestamptz,
        error text,
        timeline_recorded boolean not null default false
      );
      create index messages_incident on comms.messages (org_id, incident_id, drafted_at, id);
      -- One war-room link offer per incident, however often the opened event is delivered.
      create unique index messages_one_war_room_link on comms.messages (org_id, incident_id) where origin = 'war_room_link';
      create index messages_timeline_pending on comms.messages (finished_at)
        where timeline_recorded = false and state in ('sent', 'simulated', 'failed');
    `,
  },
  outboxMigration("comms", 2),
  {
    id: 3,
    name: "drafts edited and discarded; the organization's second-approver setting",
    // A draft's text can be replaced (at its version) until it is approved; a discarded draft is
    // kept, marked, so the record of what was proposed stays. No row in approval_settings: the
    // drafter may approve, as before.
    sql: `
      alter table comms.messages add column edited_by text, add column edited_at timestamptz;
      alter table comms.messages drop constraint messages_state_check;
      alter table comms.messages add constraint messages_state_check
        check (state in ('drafted', 'approved', 'sending', 'sent', 'simulated', 'failed', 'discarded'));
      create table comms.approval_settings (
        org_id uuid primary key,
        require_second_approver boolean not null,
        changed_by text not null,
        changed_at timestamptz not null default now()
      );
    `,
  },
  ...outboxUpgrades("comms"),
];
