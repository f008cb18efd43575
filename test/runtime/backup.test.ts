import { spawn } from "node:child_process";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { restoreBackupFile } from "../../services/admin/backup.js";
import { BackupFileError, readBackup } from "../../services/admin/backup-file.js";
import { createLogger } from "../../services/runtime/observability/logger.js";
import { KEY_FILE_NAME } from "../../services/runtime/credentials/secret-box.js";
import { makeTestCertificates, startCanary, startChatWebhookReceiver, type ChatWebhookReceiver } from "../support/https-receiver.js";
import { callApi, OWNER } from "../support/app.js";
import { nodeArgsFor } from "../support/compiled-services.js";
import { embeddedEnv, startServiceProcess, tempDataDir, waitFor, type ServiceProcess } from "../support/service-process.js";

/**
 * The embedded database's backup: `npm run admin -- backup` while the one-process service runs and
 * deliveries keep arriving, `restore` into a new DATA_DIR, and the service started on it answers
 * the same incidents, the same ping URL and posts to the same (sealed) chat-webhook URL.
 */

const ROOT = resolve(import.meta.dirname, "../..");
const CONNECTION = `/o/${OWNER.org}/integrations/chatwebhook/connections/default`;
const cleanups: Array<() => unknown> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

const certs = makeTestCertificates();
cleanups.push(() => certs.remove());
let receiver: ChatWebhookReceiver;

/** The service's settings: no SECRETS_KEYS, so the key is the file in DATA_DIR the backup carries. */
const serviceEnv = (dataDir: string) =>
  embeddedEnv(dataDir, {
    SECRETS_KEYS: "",
    PUBLIC_URL: "https://warroom.example.test",
    EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
    EGRESS_CA_FILE: certs.caFile,
  });

function runAdmin(args: string[], dataDir: string): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, [...nodeArgsFor("services/admin/admin-cli.ts"), ...args], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: "", NATS_URL: "", SECRETS_KEYS: "", DATA_DIR: dataDir, LOG_LEVEL: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr.on("data", (c: Buffer) => (output += c.toString()));
  // A hang detector, not a budget: the command's output so far says where it stopped.
  const hang = setTimeout(() => child.kill("SIGKILL"), 90_000);
  return new Promise((resolve) =>
    child.once("exit", (code, signal) => {
      clearTimeout(hang);
      resolve({ code, output: signal ? `${output}\n(killed: no answer within 90 s)` : output });
    }),
  );
}

async function startService(dataDir: string): Promise<{ service: ServiceProcess; url: string; stop(): Promise<void> }> {
  const service = startServiceProcess(serviceEnv(dataDir));
  const stop = async () => {
    if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill("SIGTERM");
    await service.exited;
  };
  try {
    const { url } = await service.serving;
    await waitFor(`${url}/readyz`);
    return { service, url, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function login(url: string): Promise<string> {
  const res = await callApi(url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
  expect(res.status).toBe(200);
  return res.body.accessToken;
}

const alert = (id: string, event: string) => ({
  title: `[Triggered on {host:${id}}] Disk almost full`,
  body: "disk above 95%",
  alert_id: id,
  alert_transition: "Triggered",
  alert_type: "error",
  alert_priority: "P2",
  event_id: event,
});

const trigger = (url: string, token: string, body: unknown) =>
  callApi(url, "POST", "/triggers", { headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, raw: JSON.stringify(body) });

/** Every incident of the organization with its timeline's event ids, by incident id. */
async function incidentsWithTimelines(url: string, token: string): Promise<Map<string, string[]>> {
  const list = await callApi(url, "GET", `/o/${OWNER.org}/incidents?limit=1000`, { token });
  expect(list.status).toBe(200);
  const out = new Map<string, string[]>();
  for (const { id } of list.body.incidents as { id: string }[]) {
    const one = await callApi(url, "GET", `/o/${OWNER.org}/incidents/${id}`, { token });
    expect(one.status).toBe(200);
    out.set(id, (one.body.timeline as { eventId?: string; kind: string }[]).map((e) => `${e.kind}:${e.eventId ?? ""}`).sort());
  }
  return out;
}

const original = tempDataDir("wr-backup-src-");
const restored = tempDataDir("wr-backup-dst-");
cleanups.push(
  () => original.cleanup(),
  () => restored.cleanup(),
);
const backupFile = join(resolve(original.dir, ".."), "warroom.backup");

beforeAll(async () => {
  const canary = await startCanary();
  cleanups.push(() => canary.close());
  receiver = await startChatWebhookReceiver(certs, `https://127.0.0.1:${canary.port}/landing`);
  cleanups.push(() => receiver.close());
});

describe("backup and restore of the embedded database", () => {
  let before: Map<string, string[]>;
  let pingPath: string;
  let webhookKey: string;
  let ingestToken: string;

  // Each test starts the service or the admin command as child processes: minutes on a loaded machine.
  it("takes a consistent backup while the service runs and deliveries keep arriving", { timeout: 300_000 }, async () => {
    const running = await startService(original.dir);
    try {
      const owner = await login(running.url);
      const issued = await callApi(running.url, "POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: owner });
      expect([200, 201]).toContain(issued.status);
      ingestToken = issued.body.token;
      // Incidents with timelines: five alerts, each triggered three times.
      for (let a = 0; a < 5; a++) {
        for (let e = 0; e < 3; e++) expect((await trigger(running.url, ingestToken, alert(`disk-${a}`, `disk-${a}-e${e}`))).status).toBeLessThan(300);
      }
      const heartbeat = await callApi(running.url, "POST", `/o/${OWNER.org}/heartbeats`, {
        token: owner,
        body: { name: "nightly-backup", expectedIntervalSeconds: 3600, graceSeconds: 300 },
      });
      expect(heartbeat.status).toBe(201);
      pingPath = new URL(heartbeat.body.pingUrl).pathname;
      webhookKey = `k${Date.now().toString(36)}`;
      const saved = await callApi(running.url, "PUT", CONNECTION, { token: owner, body: { webhookUrl: receiver.url("ok", webhookKey) } });
      expect(saved.status).toBe(200);
      // The chat-webhook URL is sealed under the key file the service made in DATA_DIR.
      expect(existsSync(join(original.dir, KEY_FILE_NAME))).toBe(true);
      before = await incidentsWithTimelines(running.url, owner);
      expect(before.size).toBe(5);

      // Deliveries keep arriving, new alerts and repeats, for as long as the backup runs.
      let arriving = true;
      let sent = 0;
      const load = (async () => {
        while (arriving) {
          const n = sent++;
          const answer = await trigger(running.url, ingestToken, alert(`load-${n % 7}`, `load-${n}`));
          expect(answer.status).toBeLessThan(300);
        }
      })();
      const backup = await runAdmin(["backup", "--out", backupFile], original.dir);
      arriving = false;
      await load;
      expect(backup.output).toMatch(/backup written to .* in [\d.]+ s: \d+ tables, \d+ rows/);
      expect(backup.code).toBe(0);
      expect(sent, "deliveries answered while the backup ran").toBeGreaterThan(0);
      expect(statSync(backupFile).mode & 0o777).toBe(0o600);
      // The service kept serving throughout, and still does.
      expect((await callApi(running.url, "GET", "/readyz")).status).toBe(200);
    } finally {
      await running.stop();
    }

    const check = await runAdmin(["check-backup", "--from", backupFile], original.dir);
    expect(check.output).toMatch(/is a complete backup: .*secrets key file: included/);
    expect(check.code).toBe(0);
  });

  it("restores into a new DATA_DIR; the service on it answers the same incidents, ping URL and webhook", { timeout: 300_000 }, async () => {
    const restore = await runAdmin(["restore", "--from", backupFile], restored.dir);
    expect(restore.output).toMatch(/restored .* into /);
    expect(restore.code).toBe(0);
    expect(readFileSync(join(restored.dir, KEY_FILE_NAME), "utf8")).toBe(readFileSync(join(original.dir, KEY_FILE_NAME), "utf8"));
    expect(statSync(join(restored.dir, KEY_FILE_NAME)).mode & 0o777).toBe(0o600);

    const running = await startService(restored.dir);
    try {
      const owner = await login(running.url);
      const after = await incidentsWithTimelines(running.url, owner);
      // Every incident from before the backup, with its whole timeline.
      for (const [id, timeline] of before) expect(after.get(id), `incident ${id}`).toEqual(timeline);
      // The snapshot is one moment: each load incident has its opening and whole timelines only.
      for (const [id, timeline] of after)
        expect(
          timeline.filter((e) => e.startsWith("opened:")),
          `incident ${id}`,
        ).toHaveLength(1);

      // The ping URL opens with the restored key, and a ping through it is taken.
      const heartbeat = await callApi(running.url, "GET", `/o/${OWNER.org}/heartbeats/nightly-backup`, { token: owner });
      expect(heartbeat.status).toBe(200);
      expect(new URL(heartbeat.body.pingUrl).pathname).toBe(pingPath);
      expect((await callApi(running.url, "POST", pingPath)).status).toBe(200);

      // The sealed webhook URL opens: Test connection posts to it.
      const posted = receiver.posts.length;
      const tested = await callApi(running.url, "POST", `${CONNECTION}/test`, { token: owner });
      expect(tested.body).toEqual({ ok: true, error: null });
      expect(receiver.posts.length).toBe(posted + 1);
      expect(receiver.posts.at(-1)!.path).toContain(webhookKey);

      // The ingest token and the alerts' identities survive: a repeat attaches, it does not open.
      const repeat = await trigger(running.url, ingestToken, alert("disk-0", "disk-0-after-restore"));
      expect(repeat.body.outcome).toBe("attached");
      expect(before.has(repeat.body.incidentId)).toBe(true);
      // New rows get new ids: the sequences were restored with the rows.
      const fresh = await trigger(running.url, ingestToken, alert("after-restore", "after-restore-e0"));
      expect(fresh.body.outcome).toBe("opened");
    } finally {
      await running.stop();
    }
  });

  it("with no service running, starts the database itself for the backup", { timeout: 300_000 }, async () => {
    const file = join(resolve(original.dir, ".."), "stopped.backup");
    const backup = await runAdmin(["backup", "--out", file], original.dir);
    expect(backup.output).toMatch(/backup written to .*secrets key file: included/);
    expect(backup.code).toBe(0);
    // It stopped that database again and released the folder.
    expect(existsSync(join(original.dir, "warroom.lock"))).toBe(false);
    expect(existsSync(join(original.dir, "pg", "postmaster.pid"))).toBe(false);
    const incidents = (m: Awaited<ReturnType<typeof readBackup>>) => m.tables.find((t) => t.name === "incidents.incidents")!.rows;
    // Everything the first backup holds, and what arrived after it.
    expect(incidents(await readBackup(file))).toBeGreaterThanOrEqual(incidents(await readBackup(backupFile)));
  });

  it("refuses a DATA_DIR that holds data, naming it and what to do", async () => {
    const again = await runAdmin(["restore", "--from", backupFile], original.dir);
    expect(again.code).toBe(1);
    expect(again.output).toContain(`DATA_DIR ${original.dir} is not empty`);
    expect(again.output).toMatch(/new or empty folder/);
    // Nothing was touched: the original still starts with its data.
    expect(existsSync(join(original.dir, "pg", "PG_VERSION"))).toBe(true);
  });

  it("refuses a truncated, a damaged or a newer backup before creating anything", async () => {
    const bytes = readFileSync(backupFile);
    const dir = resolve(original.dir, "..");
    const logger = createLogger("silent", "test");
    const attempt = async (name: string, content: Buffer) => {
      const file = join(dir, name);
      writeFileSync(file, content);
      const target = join(dir, `target-${name}`);
      const error = await restoreBackupFile(file, target, logger).then(
        () => undefined,
        (err: Error) => err,
      );
      expect(error).toBeInstanceOf(BackupFileError);
      expect(existsSync(target), "no DATA_DIR created").toBe(false);
      return error!.message;
    };
    expect(await attempt("cut.backup", bytes.subarray(0, Math.floor(bytes.length / 2)))).toMatch(/is cut short: it ends at byte \d+ inside .*take a new one/);

    // One bit of a row changed: only the checksum can tell.
    const flipped = Buffer.from(bytes);
    const inRow = bytes.indexOf("disk above 95%");
    expect(inRow).toBeGreaterThan(0);
    flipped[inRow] = flipped[inRow]! ^ 0x20;
    expect(await attempt("flipped.backup", flipped)).toMatch(/is damaged: the checksum does not match/);

    expect(await attempt("other.backup", Buffer.from("PGDMP not ours"))).toMatch(/is not a warroom backup/);

    // The same backup with a manifest claiming a migration this version does not have.
    const manifest = await readBackup(backupFile);
    const trailer = Buffer.from("\nend of warroom backup\n");
    const json = Buffer.from(JSON.stringify(manifest));
    const body = bytes.subarray(0, bytes.length - trailer.length - json.length - 5);
    const newer = Buffer.from(JSON.stringify({ ...manifest, schemas: { ...manifest.schemas, incidents: 999_999 } }));
    const length = Buffer.alloc(4);
    length.writeUInt32BE(newer.length);
    expect(await attempt("newer.backup", Buffer.concat([body, Buffer.from("M"), length, newer, trailer]))).toMatch(
      /comes from a newer version: its schema "incidents" is at migration 999999/,
    );
  });
});
