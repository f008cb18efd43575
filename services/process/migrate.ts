import { ConfigError, loadConfig } from "../runtime/config/config.js";
import { openDatabase } from "../runtime/data/database.js";
import { DataDirLockedError } from "../runtime/data/data-dir-lock.js";
import { EmbeddedPostgresError } from "../runtime/data/embedded-postgres.js";
import { createLogger } from "../runtime/observability/logger.js";
import { migrate } from "../runtime/data/migrations.js";
import { allMigrations } from "./all-migrations.js";

/**
 * The migration command (`node dist/services/process/migrate.js`, `npm run migrate`): applies every
 * service's migrations to DATABASE_URL (or the embedded database in DATA_DIR, the service stopped)
 * and exits 0, one JSON line per service saying what it applied. Run once per upgrade, before the
 * new version's processes (MIGRATE_ON_START=false) roll out; see docs/OPERATIONS.md.
 */
async function run(): Promise<number> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    createLogger("fatal", "migrate").fatal((err as Error).message);
    return 1;
  }
  const logger = createLogger(config.LOG_LEVEL, "migrate");
  let database: Awaited<ReturnType<typeof openDatabase>>;
  try {
    database = await openDatabase({ url: config.DATABASE_URL, dataDir: config.DATA_DIR, poolSize: 1 }, logger);
  } catch (err) {
    const explained = err instanceof ConfigError || err instanceof DataDirLockedError || err instanceof EmbeddedPostgresError;
    if (explained) createLogger("fatal", "migrate").fatal(err.message);
    else createLogger("fatal", "migrate").fatal({ err }, "could not open the database");
    return 1;
  }
  try {
    for (const { schema, migrations } of allMigrations) {
      const applied = await migrate(database.sql, schema, migrations);
      logger.info({ service: schema, applied: applied.map((m) => ({ id: m.id, name: m.name })), known: migrations.length }, "migrated");
    }
    return 0;
  } catch (err) {
    // The failed migration's transaction rolled back: the schema is as before this service's run.
    createLogger("fatal", "migrate").fatal({ err }, "a migration failed; nothing of that service's migrations was applied");
    return 1;
  } finally {
    await database.close().catch(() => {});
  }
}

process.exit(await run());
