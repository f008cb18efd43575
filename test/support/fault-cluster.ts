import postgres from "postgres";
import type { Cluster, ClusterOptions, ClusterProcess } from "../../services/process/cluster.js";
import { startTestCluster } from "./compiled-services.js";
import { faultClusterEnv, ownerAndIngestToken, verifyLoad, type LoadResult } from "../faults/load.js";
import { freshDatabase } from "./app.js";
import { startPrivateNats, type PrivateNats } from "./nats-server.js";
import { startPrivatePostgres, type PrivatePostgres } from "./postgres-server.js";

/**
 * The setup the fault tests share: the production shape (every service its own process) on a NATS
 * server of its own that a test may stop and restart, over a fresh database on the run's server,
 * or over a private Postgres server a test may stop too; a connection of the test's own to that
 * database, the bootstrap owner's token and an ingest token, and the report of the loads run.
 */
export interface FaultCluster {
  cluster: Cluster;
  nats: PrivateNats;
  /** The private Postgres server, with `postgres: "private"`. */
  pg: PrivatePostgres | undefined;
  databaseUrl: string;
  sql: postgres.Sql;
  /** The bootstrap owner's access token and the organization's ingest token (empty with `login: false`). */
  owner: string;
  ingest: string;
  /** The cluster's first process named `name`. */
  processNamed(name: string): ClusterProcess;
  /** The rows printed at the end, one a fault: what was sent, acknowledged, found once, doubled and lost. */
  report: Record<string, string | number>[];
  /** Asserts a load lost and doubled nothing, and adds its row to the report. */
  verify(name: string, result: LoadResult): Promise<void>;
  /** Prints the report under `title` (when a load ran), and stops and removes everything. */
  stop(): Promise<void>;
}

export async function startFaultCluster(options: {
  /** The environment beside faultClusterEnv's (the pool size, the shutdown grace, ...). */
  env: NodeJS.ProcessEnv;
  gateways: number;
  intakes: number;
  extra?: ClusterOptions["extra"];
  output?: ClusterOptions["output"];
  /** A Postgres server of the file's own, which its tests stop and restart; else a fresh database on the run's server. */
  postgres?: "private" | "shared";
  /** Log in as the bootstrap owner and issue an ingest token once the cluster is up (the default). */
  login?: boolean;
  /** The heading of the report printed at the end. */
  title?: string;
}): Promise<FaultCluster> {
  const stops: (() => Promise<unknown>)[] = [];
  const stopAll = async () => {
    for (const stop of stops.reverse()) await stop();
  };
  try {
    let pg: PrivatePostgres | undefined;
    let databaseUrl: string;
    if (options.postgres === "private") {
      pg = await startPrivatePostgres();
      stops.push(() => pg!.cleanup());
      databaseUrl = pg.url;
    } else {
      const database = await freshDatabase({ migrated: true });
      stops.push(() => database.drop());
      databaseUrl = database.url;
    }
    const nats = await startPrivateNats();
    stops.push(() => nats.cleanup());
    const cluster = await startTestCluster({
      env: faultClusterEnv(databaseUrl, nats.url, options.env),
      port: 0,
      gateways: options.gateways,
      intakes: options.intakes,
      extra: options.extra,
      output: options.output,
    });
    stops.push(() => cluster.stop());
    const sql = postgres(databaseUrl, { max: 2, onnotice: () => {} });
    stops.push(() => sql.end({ timeout: 2 }));
    const { owner, ingest } = options.login === false ? { owner: "", ingest: "" } : await ownerAndIngestToken(cluster.gatewayUrls[0]!);
    const report: Record<string, string | number>[] = [];
    return {
      cluster,
      nats,
      pg,
      databaseUrl,
      sql,
      owner,
      ingest,
      report,
      processNamed(name) {
        const found = cluster.processes.find((p) => p.name === name);
        if (!found) throw new Error(`no ${name} process in the cluster`);
        return found;
      },
      verify: (name, result) => verifyLoad(sql, report, name, result),
      async stop() {
        if (report.length > 0) {
          console.log(`\n${options.title ?? "Faults"}: deliveries sent, acknowledged (2xx) and found in the database`);
          console.table(report);
        }
        await stopAll();
      },
    };
  } catch (err) {
    // What started is stopped: a half-started cluster would outlive the file.
    await stopAll().catch(() => {});
    throw err;
  }
}
