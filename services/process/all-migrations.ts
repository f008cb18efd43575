import { migrations as comms } from "../comms/migrations.js";
import { migrations as heartbeats } from "../heartbeats/migrations.js";
import { migrations as identity } from "../identity/migrations.js";
import { migrations as incidents } from "../incidents/migrations.js";
import { migrations as intake } from "../intake/migrations.js";
import { migrations as remotesource } from "../remotesource/migrations.js";
import { migrations as subscriptions } from "../subscriptions/migrations.js";
import type { Migration } from "../runtime/data/migrations.js";

/**
 * Every service's migrations by schema (a service's schema is its name), in the order of
 * allServices: what the migration command applies without starting any service. A service missing
 * here is found at once: its processes started with MIGRATE_ON_START=false refuse to start.
 */
export const allMigrations: ReadonlyArray<{ schema: string; migrations: readonly Migration[] }> = [
  { schema: "identity", migrations: identity },
  { schema: "incidents", migrations: incidents },
  { schema: "intake", migrations: intake },
  { schema: "heartbeats", migrations: heartbeats },
  { schema: "comms", migrations: comms },
  { schema: "remotesource", migrations: remotesource },
  { schema: "subscriptions", migrations: subscriptions },
];
