import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { writeBackupFile } from "../../services/admin/backup.js";
import { readBackup } from "../../services/admin/backup-file.js";
import { freshDatabase } from "../support/app.js";

/**
 * The backup streams table after table over one connection. A COPY whose last rows fill the
 * stream's buffer left postgres.js's socket paused, and the next statement never got its answer:
 * a backup of a 10,000-incident database hung for good after a few tables. Many tables of a few
 * hundred KiB each, read while the file writes wait, make that ending all but certain.
 */

const cleanups: Array<() => unknown> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

describe("the backup's COPY streams", () => {
  it("copy table after table to the end, the rows and the checksum read back", async () => {
    const database = await freshDatabase();
    cleanups.push(() => database.drop());
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    cleanups.push(() => sql.end());
    const TABLES = 30;
    const ROWS = 2_000;
    await sql.unsafe("create schema copytest; create table copytest.schema_migrations (id int primary key, name text)");
    await sql`insert into copytest.schema_migrations values (1, 'first')`;
    for (let t = 0; t < TABLES; t++) {
      await sql.unsafe(`create table copytest.t${String(t).padStart(2, "0")} (id int primary key, body text)`);
      await sql.unsafe(`insert into copytest.t${String(t).padStart(2, "0")} select g, repeat(md5(g::text), 6) from generate_series(1, ${ROWS}) g`);
    }
    const dir = mkdtempSync(join(tmpdir(), "wr-backup-copy-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, "copy.backup");

    const manifest = await writeBackupFile(sql, file, undefined);
    expect(manifest.schemas).toEqual({ copytest: 1 });
    expect(manifest.tables).toHaveLength(TABLES + 1);
    for (const table of manifest.tables.filter((t) => t.name !== "copytest.schema_migrations")) expect(table.rows, table.name).toBe(ROWS);
    expect((await readBackup(file)).sha256).toBe(manifest.sha256);
    // The connection still answers after the last COPY.
    expect((await sql`select 1 as one`)[0]!.one).toBe(1);
  });
});
