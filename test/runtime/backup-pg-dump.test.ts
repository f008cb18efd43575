import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { makeTestCertificates, startCanary, startChatWebhookReceiver } from "../support/https-receiver.js";
import { newSecretKeyEntry } from "../../services/runtime/credentials/secret-box.js";
import { OWNER, startApp, type TestApp } from "../support/app.js";
import { startPrivatePostgres } from "../support/postgres-server.js";

/**
 * Server mode's backup is the operator's own: pg_dump -Fc of the database, pg_restore into a new
 * one, and the same SECRETS_KEYS (docs/OPERATIONS.md, "Backups"). The round trip, through the API.
 *
 * pg_dump refuses a server newer than itself, and the embedded binaries the other tests' server
 * runs (Postgres 18) come without pg_dump: this test runs a Postgres server of the system's own
 * install (Debian's postgresql package, /usr/lib/postgresql/<major>/bin) with its pg_dump.
 */

/** The newest system Postgres install with a server and pg_dump. */
function systemPostgresBin(): string {
  const root = "/usr/lib/postgresql";
  const majors = existsSync(root) ? readdirSync(root).filter((v) => /^\d+$/.test(v)) : [];
  const bin = majors
    .sort((a, b) => Number(b) - Number(a))
    .map((v) => join(root, v, "bin"))
    .find((dir) => ["postgres", "initdb", "pg_ctl", "pg_dump", "pg_restore"].every((p) => existsSync(join(dir, p))));
  if (!bin) throw new Error(`no Postgres server with pg_dump under ${root}: install Debian's postgresql package (apt-get install postgresql)`);
  return bin;
}

const cleanups: Array<() => unknown> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

describe("server mode: pg_dump and pg_restore with the same SECRETS_KEYS", () => {
  it("restores a database whose incidents, ping URL and sealed webhook URL read back through the API", { timeout: 300_000 }, async () => {
    const bin = systemPostgresBin();
    const server = await startPrivatePostgres({ bin });
    cleanups.push(() => server.cleanup());
    const admin = postgres(server.url, { max: 1, onnotice: () => {} });
    cleanups.push(() => admin.end());
    await admin`create database warroom`;
    await admin`create database warroom_restored`;
    const urlOf = (name: string) => server.url.replace(/\/postgres$/, `/${name}`);

    const certs = makeTestCertificates();
    cleanups.push(() => certs.remove());
    const canary = await startCanary();
    cleanups.push(() => canary.close());
    const receiver = await startChatWebhookReceiver(certs, `https://127.0.0.1:${canary.port}/landing`);
    cleanups.push(() => receiver.close());
    const env = {
      SECRETS_KEYS: newSecretKeyEntry("k1"),
      PUBLIC_URL: "https://warroom.example.test",
      EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
      EGRESS_CA_FILE: certs.caFile,
    };
    const connection = `/o/${OWNER.org}/integrations/chatwebhook/connections/default`;
    const webhookKey = `k${Date.now().toString(36)}`;

    const incidentsOf = async (app: TestApp, token: string) => {
      const list = await app.call("GET", `/o/${OWNER.org}/incidents?limit=1000`, { token });
      expect(list.status).toBe(200);
      const out: Record<string, string[]> = {};
      for (const { id } of list.body.incidents as { id: string }[]) {
        const one = await app.call("GET", `/o/${OWNER.org}/incidents/${id}`, { token });
        out[id] = (one.body.timeline as { kind: string; eventId?: string }[]).map((e) => `${e.kind}:${e.eventId ?? ""}`).sort();
      }
      return out;
    };

    let before: Record<string, string[]>;
    let pingPath: string;
    const first = await startApp({ databaseUrl: urlOf("warroom"), env });
    try {
      const owner = await first.ownerToken();
      const issued = await first.call("POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: owner });
      for (let a = 0; a < 3; a++) {
        for (let e = 0; e < 3; e++) {
          const answer = await first.call("POST", "/triggers", {
            token: issued.body.token,
            body: { title: `Disk almost full on db-${a}`, alert_id: `db-${a}`, event_id: `db-${a}-e${e}`, alert_transition: "Triggered", alert_type: "error" },
          });
          expect(answer.status).toBeLessThan(300);
        }
      }
      const heartbeat = await first.call("POST", `/o/${OWNER.org}/heartbeats`, {
        token: owner,
        body: { name: "nightly", expectedIntervalSeconds: 3600, graceSeconds: 300 },
      });
      expect(heartbeat.status).toBe(201);
      pingPath = new URL(heartbeat.body.pingUrl).pathname;
      expect((await first.call("PUT", connection, { token: owner, body: { webhookUrl: receiver.url("ok", webhookKey) } })).status).toBe(200);
      before = await incidentsOf(first, owner);
      expect(Object.keys(before)).toHaveLength(3);

      // While the service runs: pg_dump takes one snapshot of the database.
      const dir = mkdtempSync(join(tmpdir(), "wr-pg-dump-"));
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      const dump = join(dir, "warroom.dump");
      execFileSync(join(bin, "pg_dump"), ["-Fc", "-f", dump, "-d", urlOf("warroom")], { stdio: "pipe" });
      execFileSync(join(bin, "pg_restore"), ["--no-owner", "--exit-on-error", "-d", urlOf("warroom_restored"), dump], { stdio: "pipe" });
    } finally {
      await first.stop();
    }

    const restored = await startApp({ databaseUrl: urlOf("warroom_restored"), env });
    try {
      const owner = await restored.ownerToken();
      expect(await incidentsOf(restored, owner)).toEqual(before);
      const heartbeat = await restored.call("GET", `/o/${OWNER.org}/heartbeats/nightly`, { token: owner });
      expect(new URL(heartbeat.body.pingUrl).pathname).toBe(pingPath);
      const posted = receiver.posts.length;
      const tested = await restored.call("POST", `${connection}/test`, { token: owner });
      expect(tested.body).toEqual({ ok: true, error: null });
      expect(receiver.posts.length).toBe(posted + 1);
      expect(receiver.posts.at(-1)!.path).toContain(webhookKey);
    } finally {
      await restored.stop();
    }
  });
});
