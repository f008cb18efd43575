import { spawn } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { binaries } from "../../services/runtime/data/embedded-postgres.js";
import { ADMIN_DATABASE_URL, NATS_URL } from "../support/app.js";
import { startPrivatePostgres } from "../support/postgres-server.js";
import { startTestServers, type TestServers } from "../support/test-servers.js";

const ROOT = resolve(import.meta.dirname, "../..");

function answers(port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      done(true);
    });
    socket.once("error", () => done(false));
  });
}

/** Polls until nothing answers on the port; `hangMs` only detects a server that never stops. */
async function closes(port: number, hangMs: number): Promise<boolean> {
  const deadline = Date.now() + hangMs;
  while (Date.now() < deadline) {
    if (!(await answers(port))) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

async function checkPostgres(url: string): Promise<string> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<[{ method: string }]>`show password_encryption`;
    return row.method ?? (row as unknown as Record<string, string>).password_encryption!;
  } finally {
    await sql.end();
  }
}

async function checkJetStream(url: string): Promise<void> {
  const nc = await connect({ servers: url });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.getAccountInfo();
  } finally {
    await nc.close();
  }
}

describe("the servers of a test run", () => {
  const runs: TestServers[] = [];
  afterAll(async () => {
    await Promise.all(runs.map((r) => r.stop()));
  });

  it("the workers find the run's servers through DATABASE_URL and NATS_URL", () => {
    // The global setup exported them before any worker started.
    expect(process.env.DATABASE_URL).toBe(ADMIN_DATABASE_URL);
    expect(process.env.NATS_URL).toBe(NATS_URL);
  });

  it("two runs at once: their own free ports and folders, a generated password checked with scram-sha-256, JetStream on", async () => {
    const [a, b] = await Promise.all([startTestServers({}), startTestServers({})]);
    runs.push(a, b);
    expect(a.started).toEqual({ postgres: true, nats: true });
    const pgA = new URL(a.databaseUrl);
    const pgB = new URL(b.databaseUrl);
    const natsA = new URL(a.natsUrl);
    const natsB = new URL(b.natsUrl);
    const ports = [pgA.port, pgB.port, natsA.port, natsB.port];
    expect(new Set(ports).size).toBe(4);
    expect(ports).not.toContain("5432");
    expect(ports).not.toContain("4222");
    expect(a.dir).not.toBe(b.dir);
    expect(pgA.password.length).toBeGreaterThanOrEqual(24);
    expect(pgA.password).not.toBe(pgB.password);

    expect(await checkPostgres(a.databaseUrl)).toBe("scram-sha-256");
    expect(await checkPostgres(b.databaseUrl)).toBe("scram-sha-256");
    // Without the password, or with another run's, the server refuses.
    const noPassword = new URL(a.databaseUrl);
    noPassword.password = "";
    await expect(checkPostgres(noPassword.toString())).rejects.toThrow(/password/i);
    const otherPassword = new URL(a.databaseUrl);
    otherPassword.password = pgB.password;
    await expect(checkPostgres(otherPassword.toString())).rejects.toThrow(/password authentication failed/);
    await checkJetStream(a.natsUrl);
    await checkJetStream(b.natsUrl);

    // Stopping one run leaves the other answering; the stopped one leaves no port or folder.
    await a.stop();
    expect(await answers(Number(pgA.port))).toBe(false);
    expect(await answers(Number(natsA.port))).toBe(false);
    expect(existsSync(a.dir!)).toBe(false);
    expect(await checkPostgres(b.databaseUrl)).toBe("scram-sha-256");
    await checkJetStream(b.natsUrl);
  });

  it("DATABASE_URL and NATS_URL still name external servers: nothing is started", async () => {
    const external = await startTestServers({ DATABASE_URL: ADMIN_DATABASE_URL, NATS_URL });
    runs.push(external);
    expect(external).toMatchObject({ databaseUrl: ADMIN_DATABASE_URL, natsUrl: NATS_URL, started: { postgres: false, nats: false } });
    expect(external.dir).toBeUndefined();
  });

  it("a private Postgres runs from a folder only its owner can enter (a clone in mktemp -d or /root)", async () => {
    // The clone's binaries and the server's folder both under a mode 0700 folder.
    const closed = mkdtempSync(join(tmpdir(), "wr-closed-"));
    chmodSync(closed, 0o700);
    try {
      const copy = join(closed, "embedded-postgres");
      cpSync(binaries().root, copy, { recursive: true, verbatimSymlinks: true });
      const server = await startPrivatePostgres({ bin: join(copy, "native", "bin"), parent: closed });
      try {
        const sql = postgres(server.url, { max: 1, onnotice: () => {} });
        const [row] = await sql<[{ one: number }]>`select 1 as one`;
        await sql.end();
        expect(row.one).toBe(1);
        await server.stop("fast");
        await server.start();
      } finally {
        await server.cleanup();
      }
    } finally {
      rmSync(closed, { recursive: true, force: true });
    }
  });

  it("a run (or a test worker) killed with kill -9 leaves nothing running", async () => {
    // A run as a separate process, which prints its URLs and waits to be killed.
    const tmp = mkdtempSync(join(tmpdir(), "wr-killed-run-"));
    chmodSync(tmp, 0o755);
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "-e",
        `const { startTestServers } = await import(${JSON.stringify(resolve(ROOT, "test/support/test-servers.ts"))});
         const { startPrivatePostgres } = await import(${JSON.stringify(resolve(ROOT, "test/support/postgres-server.ts"))});
         const { startPrivateNats } = await import(${JSON.stringify(resolve(ROOT, "test/support/nats-server.ts"))});
         const s = await startTestServers({});
         // And a fault test's own servers, as a test worker starts them.
         const faultPg = await startPrivatePostgres();
         const faultNats = await startPrivateNats();
         console.log(JSON.stringify({ pg: s.databaseUrl, nats: s.natsUrl, dir: s.dir, faultPg: faultPg.url, faultNats: faultNats.url }));
         setInterval(() => {}, 1000);`,
      ],
      // Its folders in one of this test's own, removed at the end: a kill -9 leaves them behind.
      { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, TMPDIR: tmp } },
    );
    const line = await new Promise<string>((done, fail) => {
      let out = "";
      child.stdout!.on("data", (chunk) => {
        out += chunk;
        if (out.includes("\n")) done(out.split("\n")[0]!);
      });
      child.once("exit", (code) => fail(new Error(`the run exited (${code}) before it started its servers`)));
    });
    const started = JSON.parse(line) as { pg: string; nats: string; dir: string; faultPg: string; faultNats: string };
    try {
      const ports = [started.pg, started.nats, started.faultPg, started.faultNats].map((url) => Number(new URL(url).port));
      for (const port of ports) expect(await answers(port)).toBe(true);
      child.kill("SIGKILL");
      // A hang detector: each stops within a second or two of the kill; 30 s means it never will.
      for (const port of ports) expect(await closes(port, 30_000), `port ${port}`).toBe(true);
    } finally {
      child.kill("SIGKILL");
      // Only the folders stay after a kill -9 (test.sh removes its run's folder on exit).
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
