import { parseArgs } from "node:util";
import { createClient } from "@connectrpc/connect";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { createInProcessBroadcast } from "../runtime/transport/broadcast.js";
import { createClients } from "../runtime/transport/clients.js";
import { loadConfig } from "../runtime/config/config.js";
import { DataDirLockedError } from "../runtime/data/data-dir-lock.js";
import { openDatabase, type Database } from "../runtime/data/database.js";
import { createInMemoryEventBus } from "../runtime/transport/event-bus.js";
import { createLogger } from "../runtime/observability/logger.js";
import { migrate } from "../runtime/data/migrations.js";
import { createDirectTransport } from "../runtime/transport/direct-transport.js";
import { createMethodRegistry } from "../runtime/transport/unary-call.js";
import { BACKUP_USAGE, runBackupCommand } from "./backup-cli.js";
import { runImportHealthchecks } from "./import/healthchecks-cli.js";
import { runImportTool } from "./import/import-cli.js";
import { runConfigCommand } from "../intake/config-as-code/config-cli.js";
import { createIdentityService } from "../identity/service.js";

const USAGE = `usage: npm run admin -- bootstrap --org <slug> --email <owner email> --password <owner password>

Creates the organization and its owner once, against DATABASE_URL (or the embedded database in
DATA_DIR). Running it again for an existing organization changes nothing. While a service runs on
the same DATA_DIR the embedded database is its own: the command refuses; stop the service first, or
start it with BOOTSTRAP_ORG_SLUG, BOOTSTRAP_OWNER_EMAIL and BOOTSTRAP_OWNER_PASSWORD.

       npm run admin -- import-healthchecks <export.json> --org <slug> [--url <base URL>] [--dry-run]

Registers the checks of a Healthchecks export as heartbeats (see --help after the command).

       npm run admin -- import oncall|opsgenie <export.json> --org <slug> [--url <base URL>] [--dry-run] [--json]

Brings Grafana OnCall integrations and heartbeats, or Opsgenie heartbeats and API integrations,
in as custom sources and heartbeats (see --help after the command).

       npm run admin -- export | apply <file> [--dry-run]

Writes the organization's custom sources and grouping overrides as one YAML file, or applies one
(see --help after the command).

${BACKUP_USAGE.replace(/^usage: /, "       ")}`;

async function run(): Promise<number> {
  // Heartbeats' import talks to a running service over its API, not to the database.
  if (process.argv[2] === "import-healthchecks") return runImportHealthchecks(process.argv.slice(3));
  if (process.argv[2] === "import") return runImportTool(process.argv.slice(3));
  // Configuration as code talks to a running service, never to its database.
  const command = process.argv[2];
  if (command === "export" || command === "apply") return runConfigCommand(process.argv.slice(2));
  if (command === "backup" || command === "restore" || command === "check-backup") return runBackupCommand(process.argv.slice(2));
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: { org: { type: "string" }, email: { type: "string" }, password: { type: "string" }, help: { type: "boolean" } },
  });
  if (values.help || positionals[0] !== "bootstrap" || !values.org || !values.email || !values.password) {
    console.error(USAGE);
    return values.help ? 0 : 2;
  }
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL === "info" ? "warn" : config.LOG_LEVEL, "admin");
  let database: Database;
  try {
    // In embedded mode this locks DATA_DIR, so it never opens the files of a running service.
    database = await openDatabase({ url: config.DATABASE_URL, dataDir: config.DATA_DIR, poolSize: 1 }, logger);
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    if (err instanceof DataDirLockedError) {
      console.error("Stop the service first, or start it with BOOTSTRAP_ORG_SLUG, BOOTSTRAP_OWNER_EMAIL and BOOTSTRAP_OWNER_PASSWORD.");
    }
    return 1;
  }
  try {
    const registry = createMethodRegistry();
    const transport = createDirectTransport(registry);
    const identity = createIdentityService({
      config,
      sql: database.sql,
      backgroundSql: database.sql,
      openPool: () => database.sql,
      logger,
      clients: createClients(transport),
      transport: "in-memory",
      // Bootstrap writes no events; the CLI runs no relay.
      outbox: { write: async () => {}, writeMany: async () => {}, poke: () => {} },
      events: createInMemoryEventBus(logger),
      broadcast: createInProcessBroadcast(),
    });
    await migrate(database.sql, identity.name, identity.migrations);
    identity.register(registry.router);
    const result = await createClient(IdentityService, transport).bootstrap({
      orgSlug: values.org,
      ownerEmail: values.email,
      ownerPassword: values.password,
    });
    console.log(
      result.created
        ? `created organization ${result.organization?.slug} with owner ${values.email}`
        : `organization ${values.org} already exists; nothing changed`,
    );
    return 0;
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    return 1;
  } finally {
    await database.close();
  }
}

process.exit(await run());
