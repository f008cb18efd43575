import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import postgres from "postgres";
import { startEmbeddedPostgres } from "../../services/runtime/data/embedded-postgres.js";
import { startPrivateNats } from "./nats-server.js";

/**
 * The servers a test run shares: a Postgres server from the embedded binaries in node_modules (a
 * throw-away data folder, a free loopback port, a generated password checked with scram-sha-256)
 * and a nats-server with JetStream on another free port. Nothing on 5432 or 4222 is used, and two
 * runs on one machine get their own ports and folders. DATABASE_URL / NATS_URL, when set, point the
 * run at external servers instead, and that server is not started.
 *
 * Both die with the process that started them, kill -9 included (each is watched through a pipe
 * from this process), so a crashed or interrupted run leaves nothing running.
 */
export interface TestServers {
  /** The admin URL tests create their databases with (ADMIN_DATABASE_URL in test/support/app.ts). */
  databaseUrl: string;
  natsUrl: string;
  /** Which of the two this call started (the others came from the environment). */
  started: { postgres: boolean; nats: boolean };
  /** The folder holding the started servers' data, removed by stop. */
  dir?: string;
  stop(): Promise<void>;
}

export async function startTestServers(env: { DATABASE_URL?: string; NATS_URL?: string } = process.env): Promise<TestServers> {
  const wantPostgres = !env.DATABASE_URL;
  const wantNats = !env.NATS_URL;
  const dir = wantPostgres || wantNats ? mkdtempSync(join(tmpdir(), "wr-test-servers-")) : undefined;
  // As root the Postgres server runs as another user (it refuses root), who must enter the folder.
  if (dir) chmodSync(dir, 0o755);
  const removeDir = () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  };
  let stopPostgres = async () => {};
  let stopNats = async () => {};
  try {
    let databaseUrl = env.DATABASE_URL!;
    if (wantPostgres) {
      const dataDir = join(dir!, "pg-data");
      mkdirSync(dataDir, { mode: 0o755 });
      const pg = await startEmbeddedPostgres({ dataDir, logger: pino({ level: "silent" }) });
      stopPostgres = () => pg.stop();
      databaseUrl = `postgres://${pg.user}:${encodeURIComponent(pg.password)}@${pg.host}:${pg.port}/${pg.database}`;
      await withoutDurability(databaseUrl);
    }
    let natsUrl = env.NATS_URL!;
    if (wantNats) {
      // Its store in the run's folder, so that the exit handler that removes the folder takes it too.
      const nats = await startPrivateNats({ parentDir: dir });
      stopNats = () => nats.cleanup();
      natsUrl = nats.url;
    }
    let stopping: Promise<void> | undefined;
    return {
      databaseUrl,
      natsUrl,
      started: { postgres: wantPostgres, nats: wantNats },
      dir,
      stop() {
        stopping ??= Promise.allSettled([stopPostgres(), stopNats()]).then(removeDir);
        return stopping;
      },
    };
  } catch (err) {
    await Promise.allSettled([stopPostgres(), stopNats()]);
    removeDir();
    throw err;
  }
}

/**
 * The run's server keeps what it commits only as long as it runs, as the fault tests' private
 * servers do (test/support/postgres-server.ts): it is thrown away at the end and never killed
 * under a test. Every commit otherwise waited for its WAL flush, and every page's first change
 * after a checkpoint wrote the whole page to the WAL, for a crash that cannot happen here.
 */
async function withoutDurability(databaseUrl: string): Promise<void> {
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  try {
    for (const setting of ["fsync", "synchronous_commit", "full_page_writes"]) await sql.unsafe(`alter system set ${setting} = off`);
    await sql`select pg_reload_conf()`;
  } finally {
    await sql.end();
  }
}
