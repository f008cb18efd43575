import { spawn } from "node:child_process";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allMigrations } from "../../services/process/all-migrations.js";
import { migrate } from "../../services/runtime/data/migrations.js";
import { freshDatabase, startApp } from "../support/app.js";
import { startServiceProcess } from "../support/service-process.js";
import { ROOT } from "./previous-release.js";

/**
 * Migrations run once per upgrade: the migration command (what the deployment's Job runs), several
 * of them at once (replicas, or a Job racing a replica that migrates on start), and a process with
 * MIGRATE_ON_START=false on a schema behind its code, which refuses to start and names what is missing.
 */

interface Line {
  service: string;
  applied: { id: number; name: string }[];
  msg: string;
}

function runMigrate(databaseUrl: string): Promise<{ code: number | null; lines: Line[]; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", "services/process/migrate.ts"], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: "info" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => {
      const lines = stdout
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as Line);
      resolve({ code, lines, output: stdout + stderr });
    });
  });
}

const total = (schema: string) => allMigrations.find((m) => m.schema === schema)!.migrations.length;

let database: { url: string; drop(): Promise<void> };
let sql: postgres.Sql;

beforeAll(async () => {
  database = await freshDatabase();
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
});

afterAll(async () => {
  await sql?.end();
  await database?.drop();
});

describe("the migration command", () => {
  it("three at once on an empty database: each exits 0 with a line per service, and each migration is applied once", async () => {
    const runs = await Promise.all([runMigrate(database.url), runMigrate(database.url), runMigrate(database.url)]);
    for (const run of runs) {
      expect(run.code, run.output).toBe(0);
      expect(run.lines.map((l) => [l.service, l.msg])).toEqual(allMigrations.map((m) => [m.schema, "migrated"]));
    }
    for (const { schema, migrations } of allMigrations) {
      const applied = runs.flatMap((run) => run.lines.find((l) => l.service === schema)!.applied.map((a) => a.id));
      expect(
        applied.sort((a, b) => a - b),
        schema,
      ).toEqual(migrations.map((m) => m.id).sort((a, b) => a - b));
      const [row] = await sql.unsafe<{ n: number }[]>(`select count(*)::int as n from ${schema}.schema_migrations`);
      expect(row!.n, schema).toBe(total(schema));
    }
  });

  it("again on the migrated database: applies nothing, and a process with MIGRATE_ON_START=false starts on it", async () => {
    const run = await runMigrate(database.url);
    expect(run.code, run.output).toBe(0);
    expect(run.lines.every((l) => l.applied.length === 0)).toBe(true);
    // Every service the process runs has its migrations in the command's list, or this refuses.
    const app = await startApp({ databaseUrl: database.url, env: { MIGRATE_ON_START: "false" } });
    try {
      expect((await fetch(`${app.url}/readyz`)).status).toBe(200);
    } finally {
      await app.stop();
    }
  });
});

describe("MIGRATE_ON_START=true (the default)", () => {
  it("two replicas starting at once on an empty database both serve, and each migration is applied once", async () => {
    const empty = await freshDatabase();
    const apps = await Promise.allSettled([startApp({ databaseUrl: empty.url }), startApp({ databaseUrl: empty.url })]);
    const db = postgres(empty.url, { max: 1, onnotice: () => {} });
    try {
      for (const app of apps) expect(app.status, app.status === "rejected" ? String(app.reason) : "").toBe("fulfilled");
      for (const { schema, migrations } of allMigrations) {
        const rows = await db.unsafe<{ id: number }[]>(`select id from ${schema}.schema_migrations order by id`);
        expect(
          rows.map((r) => r.id),
          schema,
        ).toEqual(migrations.map((m) => m.id).sort((a, b) => a - b));
      }
    } finally {
      for (const app of apps) if (app.status === "fulfilled") await app.value.stop();
      await db.end();
      await empty.drop();
    }
  });
});

describe("MIGRATE_ON_START=false on a schema behind the code", () => {
  it("refuses to start with one JSON line naming each missing migration and how to apply them", async () => {
    const behind = await freshDatabase();
    const db = postgres(behind.url, { max: 1, onnotice: () => {} });
    try {
      // Every service migrated but intake, which lacks its latest migration.
      for (const { schema, migrations } of allMigrations) {
        const latest = Math.max(...migrations.map((m) => m.id));
        await migrate(
          db,
          schema,
          migrations.filter((m) => schema !== "intake" || m.id !== latest),
        );
      }
      const intakeLatest = allMigrations.find((m) => m.schema === "intake")!.migrations.reduce((a, b) => (b.id > a.id ? b : a));
      const child = startServiceProcess({ DATABASE_URL: behind.url, NATS_URL: "", PORT: "0", HOST: "127.0.0.1", MIGRATE_ON_START: "false" });
      const { code } = await child.exited;
      expect(code).toBe(1);
      const lines = child
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { level: number; msg: string });
      const fatal = lines.find((l) => l.level === 60);
      expect(fatal?.msg, child.output()).toContain("MIGRATE_ON_START=false");
      expect(fatal!.msg).toContain(`intake: ${intakeLatest.id} (${intakeLatest.name})`);
      expect(fatal!.msg).toContain("node dist/services/process/migrate.js");
      // Only intake is named: the others are current.
      expect(fatal!.msg).not.toMatch(/\n {2}(identity|incidents|heartbeats|comms|remotesource|subscriptions):/);
      // Nothing was applied by the refused start.
      const [row] = await db<{ n: number }[]>`select count(*)::int as n from intake.schema_migrations where id = ${intakeLatest.id}`;
      expect(row!.n).toBe(0);
    } finally {
      await db.end();
      await behind.drop();
    }
  });
});
