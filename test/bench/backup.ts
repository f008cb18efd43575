import { statSync } from "node:fs";
import { join } from "node:path";
import { connectToRunningServer, restoreBackupFile, writeBackupFile } from "../../services/admin/backup.js";
import { allServices } from "../../services/process/all-services.js";
import { runProcess } from "../../services/process/run-process.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { callApi, OWNER } from "../support/app.js";
import { tempDataDir } from "../support/service-process.js";
import { printTable } from "./stats.js";

/**
 * How long the embedded database's backup and restore take for a given size: the one-process
 * service on its embedded Postgres, 10,000 incidents opened through POST /triggers (rows in the
 * incidents, timeline, outbox-published events and intake's tables, as deliveries leave them), then a backup taken from the running service's database as
 * `npm run admin -- backup` takes it, and a restore into a new DATA_DIR (creating the database,
 * migrating, copying, analyzing) as `restore` does. `--incidents=N` changes the size.
 */

const CONCURRENCY = 32;
const MB = 1024 * 1024;

export async function benchBackup(): Promise<void> {
  const flag = process.argv.find((a) => a.startsWith("--incidents="));
  const incidents = flag ? Number(flag.slice("--incidents=".length)) : 10_000;
  const source = tempDataDir("wr-bench-backup-");
  const target = tempDataDir("wr-bench-restore-");
  const app = await runProcess({
    name: "bench",
    services: allServices,
    gateway: true,
    env: {
      DATABASE_URL: "",
      NATS_URL: "",
      SECRETS_KEYS: "",
      DATA_DIR: source.dir,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "warn",
      BOOTSTRAP_ORG_SLUG: OWNER.org,
      BOOTSTRAP_OWNER_EMAIL: OWNER.email,
      BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
    },
  });
  try {
    const login = await callApi(app.url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
    const token = (await callApi(app.url, "POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: login.body.accessToken })).body.token as string;
    const filling = Date.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (let i = next++; i < incidents; i = next++) {
          const res = await callApi(app.url, "POST", "/triggers", {
            token,
            body: {
              title: `[Triggered on {host:web-${i}}] Disk almost full`,
              body: "disk above 95% on /var/lib/postgresql",
              alert_id: `disk-${i}`,
              event_id: `disk-${i}-opened`,
              alert_transition: "Triggered",
              alert_type: "error",
              tags: ["env:prod", "service:checkout", `host:web-${i}`],
            },
          });
          if (res.status >= 300) throw new Error(`trigger ${i}: ${res.status} ${JSON.stringify(res.body)}`);
        }
      }),
    );
    const fillSeconds = (Date.now() - filling) / 1000;
    const [size] = await app.database.sql<{ bytes: string }[]>`select pg_database_size(current_database())::text as bytes`;

    const file = join(source.dir, "..", "bench.backup");
    const sql = connectToRunningServer(source.dir);
    const backupStarted = Date.now();
    const manifest = await writeBackupFile(sql, file, undefined);
    const backupSeconds = (Date.now() - backupStarted) / 1000;
    await sql.end();

    const restoreStarted = Date.now();
    await restoreBackupFile(file, target.dir, createLogger("warn", "bench"));
    const restoreSeconds = (Date.now() - restoreStarted) / 1000;

    const rows = manifest.tables.reduce((sum, t) => sum + t.rows, 0);
    printTable(`backup and restore of the embedded database (${incidents} incidents, filled in ${fillSeconds.toFixed(0)} s)`, [
      {
        incidents,
        rows,
        "database MB": (Number(size!.bytes) / MB).toFixed(1),
        "data MB": (manifest.dataBytes / MB).toFixed(1),
        "file MB": (statSync(file).size / MB).toFixed(1),
        "backup s": backupSeconds.toFixed(2),
        "restore s": restoreSeconds.toFixed(2),
      },
    ]);
  } finally {
    await app.stop();
    source.cleanup();
    target.cleanup();
  }
}
