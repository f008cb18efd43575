import type { Migration } from "../runtime/migrations.js";
import { outboxMigration, outboxUpgrades } from "../runtime/outbox.js";

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
];
