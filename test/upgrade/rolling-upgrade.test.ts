import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeTestCertificates, type TestCertificates } from "../support/https-receiver.js";
import { allMigrations } from "../../services/process/all-migrations.js";
import { EVENTS_STREAM } from "../../services/runtime/transport/event-bus.js";
import { startWebhookReceiver, type ReceivedDelivery, type WebhookReceiver } from "../../services/subscriptions/testing/webhook-receiver.js";
import { callApi, freshDatabase, OWNER } from "../support/app.js";
import { startPrivateNats, type PrivateNats } from "../support/nats-server.js";
import { startServiceProcess, type ServiceProcess } from "../support/service-process.js";
import { fixture } from "../e2e/triggers-kit.js";
import { previousRelease, prepareReleaseTree, ROOT, type ReleaseTree } from "./previous-release.js";

/**
 * A rolling upgrade and a rollback lose nothing and double nothing. The previous release (the last
 * entry of RELEASES.json, its code taken from git history) runs next to this version against one
 * database, migrated by this version's migration command, and one NATS server: deliveries (opened,
 * repeated, retried with the same Idempotency-Key, recovered, resolved), webhook subscription
 * events and heartbeats (pinged, and silent) go through both versions alternately. Then this
 * version stops and the previous release runs alone on the new schema (a rollback), and does the
 * same. Every incident, timeline entry, webhook delivery and heartbeat is counted exactly.
 */

const PUBLIC_URL = "https://warroom.example.test";
/** Incidents per phase, and heartbeats of each kind. */
const ALERTS = 6;
const HEARTBEATS = 2;
const EVENTS = ["incident.opened", "incident.repeat", "incident.recovery", "incident.resolved"];

interface Version {
  name: string;
  url: string;
  process: ServiceProcess;
}

let tree: ReleaseTree;
let database: { url: string; drop(): Promise<void> };
let nats: PrivateNats;
let certs: TestCertificates;
let receiver: WebhookReceiver;
let sql: postgres.Sql;
let natsClient: NatsConnection;
let current: Version | undefined;
let previous: Version | undefined;
const measured: Record<string, number | string> = {};

function commonEnv(): Record<string, string> {
  return {
    DATABASE_URL: database.url,
    NATS_URL: nats.url,
    PORT: "0",
    HOST: "127.0.0.1",
    // The "serving" line (with the port) is logged at info.
    LOG_LEVEL: "info",
    PUBLIC_URL,
    BOOTSTRAP_ORG_SLUG: OWNER.org,
    BOOTSTRAP_OWNER_EMAIL: OWNER.email,
    BOOTSTRAP_OWNER_PASSWORD: OWNER.password,
    SHUTDOWN_GRACE_SECONDS: "2",
    DATABASE_POOL_SIZE: "4",
    HEARTBEAT_SWEEP_SECONDS: "1",
    EGRESS_ALLOW_PRIVATE_CIDRS: "127.0.0.0/8",
    EGRESS_CA_FILE: certs.caFile,
    SUBSCRIPTION_TIMEOUT_SECONDS: "10",
    SUBSCRIPTION_RETRY_SCHEDULE_SECONDS: "0.2,0.4,0.8,1.6,3.2,6.4",
    // SECRETS_KEYS and NATS_ALLOW_UNAUTHENTICATED: the run's (vitest.config.ts), shared by both.
  };
}

async function startVersion(name: string, env: Record<string, string>, cwd?: string): Promise<Version> {
  const started = Date.now();
  const child = startServiceProcess({ ...commonEnv(), ...env }, "services/all/main.ts", cwd);
  const { url } = await child.serving;
  measured[`${name} start ms`] = Date.now() - started;
  return { name, url, process: child };
}

async function stopVersion(version: Version | undefined): Promise<void> {
  if (!version || version.process.child.exitCode !== null || version.process.child.signalCode !== null) return;
  version.process.child.kill("SIGTERM");
  const { code, signal } = await version.process.exited;
  if (code !== 0) throw new Error(`${version.name} did not stop cleanly (${code ?? signal}):\n${version.process.output().slice(-4000)}`);
}

/** Fails with the processes' last words when a call gets an answer it should not. */
function expectStatus(res: { status: number; body: unknown }, status: number, what: string): void {
  if (res.status === status) return;
  const logs = [current, previous].flatMap((v) => (v ? [`--- ${v.name}:\n${v.process.output().slice(-3000)}`] : []));
  throw new Error(`${what}: expected ${status}, got ${res.status} ${JSON.stringify(res.body)}\n${logs.join("\n")}`);
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

let owner: string;
let ingestToken: string;
let subscriptionEndpoint: string;

interface Sent {
  incidentId: string;
}

/**
 * One alert's life through the two versions `a` and `b` (the same one in a rollback): opened, a
 * repeat, the repeat again (not recorded twice), the repeat and the opening retried with their
 * Idempotency-Keys through the other version (the original answers, nothing recorded), a recovery
 * and a resolve.
 */
async function alertLife(a: Version, b: Version, tag: string): Promise<Sent> {
  const alertId = `${tag}-${randomBytes(4).toString("hex")}`;
  const body = (transition: string, eventId: string) => ({
    ...fixture("datadog/custom-body-triggered.json"),
    title: `Upgrade check ${alertId}`,
    alert_id: alertId,
    alert_transition: transition,
    event_id: eventId,
  });
  const trigger = (via: Version, payload: unknown, headers: Record<string, string> = {}) =>
    callApi(via.url, "POST", "/triggers", { token: ingestToken, body: payload, headers });
  const key = { "idempotency-key": `key-${alertId}` };
  const opened = await trigger(a, body("Triggered", `${alertId}-e1`), key);
  expectStatus(opened, 201, `opening ${alertId} through ${a.name}`);
  const incidentId = opened.body.incidentId as string;
  const repeatKey = { "idempotency-key": `repeat-${alertId}` };
  const repeat = await trigger(b, body("Re-Triggered", `${alertId}-e2`), repeatKey);
  expectStatus(repeat, 200, `a repeat of ${alertId} through ${b.name}`);
  expect(repeat.body).toMatchObject({ outcome: "attached", incidentId });
  const again = await trigger(a, body("Re-Triggered", `${alertId}-e2`));
  expectStatus(again, 200, `the same repeat of ${alertId} again through ${a.name}`);
  expect(again.body).toMatchObject({ incidentId });
  const repeatRetried = await trigger(a, body("Re-Triggered", `${alertId}-e2`), repeatKey);
  expectStatus(repeatRetried, 200, `the repeat of ${alertId} retried with its Idempotency-Key through ${a.name}`);
  expect(repeatRetried.body).toMatchObject({ outcome: "attached", incidentId });
  const retried = await trigger(b, body("Triggered", `${alertId}-e1`), key);
  expectStatus(retried, 201, `the opening of ${alertId} retried with its Idempotency-Key through ${b.name}`);
  expect(retried.body).toMatchObject({ outcome: "opened", incidentId });
  const recovered = await trigger(a, { ...body("Recovered", `${alertId}-e3`), alert_type: "success" });
  expectStatus(recovered, 200, `the recovery of ${alertId} through ${a.name}`);
  expect(recovered.body).toMatchObject({ outcome: "recorded", incidentId });
  const resolved = await callApi(b.url, "POST", `/o/${OWNER.org}/incidents/${incidentId}/resolve`, { token: owner });
  expectStatus(resolved, 200, `resolving ${alertId} through ${b.name}`);
  return { incidentId };
}

/** A heartbeat registered through `a`, pinged through `b` then `a`; and one that stays silent. */
async function heartbeatLife(a: Version, b: Version, tag: string): Promise<{ pinged: string; silent: string }> {
  const pinged = `${tag}-pinged-${randomBytes(3).toString("hex")}`;
  const silent = `${tag}-silent-${randomBytes(3).toString("hex")}`;
  const register = (name: string, interval: number, grace: number) =>
    callApi(a.url, "POST", `/o/${OWNER.org}/heartbeats`, { token: owner, body: { name, expectedIntervalSeconds: interval, graceSeconds: grace } });
  expectStatus(await register(pinged, 3600, 600), 201, `registering ${pinged} through ${a.name}`);
  for (const via of [b, a]) {
    const res = await fetch(`${via.url}/o/${OWNER.org}/heartbeats/${pinged}/ping`, { method: "POST", headers: { authorization: `Bearer ${ingestToken}` } });
    expectStatus({ status: res.status, body: await res.text() }, 204, `pinging ${pinged} through ${via.name}`);
  }
  expectStatus(await register(silent, 1, 1), 201, `registering ${silent} through ${a.name}`);
  return { pinged, silent };
}

/**
 * Every schema's outbox relayed, every event handled by every consumer, and every webhook delivery
 * settled: nothing is left in flight that could still arrive, or arrive twice, after the count.
 */
async function settled(): Promise<boolean> {
  for (const { schema } of allMigrations) {
    const [row] = await sql.unsafe<{ n: number }[]>(`select count(*)::int as n from ${schema}.outbox where published_at is null`);
    if (row!.n > 0) return false;
  }
  const jsm = await jetstreamManager(natsClient);
  for await (const consumer of jsm.consumers.list(EVENTS_STREAM)) if (consumer.num_pending + consumer.num_ack_pending > 0) return false;
  const [pending] = await sql<{ n: number }[]>`select count(*)::int as n from subscriptions.deliveries where state not in ('delivered', 'failed')`;
  return pending!.n === 0;
}

interface Expected {
  alerts: Sent[];
  heartbeats: { pinged: string; silent: string }[];
}

/** Checks every effect of what was sent, exactly: nothing lost, nothing doubled. */
async function checkExactlyOnce(expected: Expected): Promise<void> {
  const incidents = async () => {
    const res = await callApi(previous!.url, "GET", `/o/${OWNER.org}/incidents?limit=1000`, { token: owner });
    expectStatus(res, 200, "listing incidents");
    return res.body.incidents as { id: string; state: string; entity: { kind: string; id: string } | null }[];
  };
  // The silent heartbeats' incidents, opened by whichever version's sweep saw the silence first.
  const silentNames = new Set(expected.heartbeats.map((h) => h.silent));
  const silenceIncidents = await until("an incident for every silent heartbeat", async () => {
    const found = (await incidents()).filter((i) => i.entity?.kind === "heartbeat" && silentNames.has(i.entity.id));
    return new Set(found.map((i) => i.entity!.id)).size === silentNames.size ? found : undefined;
  });
  const alertIds = new Set(expected.alerts.map((a) => a.incidentId));
  const wanted = new Map<string, number>();
  for (const id of alertIds) for (const type of EVENTS) wanted.set(`${type} ${id}`, 1);
  for (const i of silenceIncidents) wanted.set(`incident.opened ${i.id}`, 1);
  const accepted = () => receiver.deliveries.filter((d) => d.endpoint === subscriptionEndpoint && d.accepted);
  const eventKey = (d: ReceivedDelivery) => `${d.event.type} ${String(d.event.data.incidentId)}`;
  await until("a webhook post of every event", async () => {
    const got = new Set(accepted().map(eventKey));
    return [...wanted.keys()].every((k) => got.has(k)) ? true : undefined;
  });
  await until("the outboxes relayed, the consumers caught up and the webhook deliveries settled", async () => ((await settled()) ? true : undefined));

  const all = await incidents();
  const heartbeatIncidents = all.filter((i) => i.entity?.kind === "heartbeat" && silentNames.has(i.entity.id));
  expect(heartbeatIncidents.map((i) => i.entity!.id).sort(), "one incident per silent heartbeat").toEqual([...silentNames].sort());
  for (const { incidentId } of expected.alerts) {
    const got = await callApi(previous!.url, "GET", `/o/${OWNER.org}/incidents/${incidentId}`, { token: owner });
    expectStatus(got, 200, `reading incident ${incidentId}`);
    expect(got.body.state, `incident ${incidentId}`).toBe("resolved");
    const kinds = (got.body.timeline as { kind: string }[]).map((e) => e.kind);
    expect(kinds, `the timeline of ${incidentId}`).toEqual(["opened", "repeat", "recovery", "resolved"]);
  }
  expect(all.filter((i) => alertIds.has(i.id))).toHaveLength(alertIds.size);

  // Webhook deliveries: one accepted post per event, and one event per (incident, kind).
  const posts = accepted();
  expect(posts.every((d) => d.verified)).toBe(true);
  const byId = new Map<string, number>();
  for (const d of posts) byId.set(d.webhookId, (byId.get(d.webhookId) ?? 0) + 1);
  // A post the receiver accepted but whose answer did not reach the sender within its timeout (a
  // loaded machine) is sent again with the same webhook-id, which receivers dedupe on: that is
  // the documented guarantee. Two posts that both had their answer (two versions sending one
  // delivery) are a double.
  for (const [webhookId, n] of byId) {
    if (n === 1) continue;
    const attempts = await sql<{ outcome: string; error: string | null }[]>`
      select outcome, error from subscriptions.attempts where delivery_id = ${webhookId} order by id`;
    expect(
      attempts.filter((a) => a.outcome === "delivered"),
      `the attempts of ${webhookId}, received ${n} times: ${JSON.stringify(attempts)}`,
    ).toHaveLength(1);
  }
  // One webhook-id per event: counted once however many times it was received.
  const byEvent = new Map<string, number>();
  for (const d of new Map(posts.map((p) => [p.webhookId, p])).values()) byEvent.set(eventKey(d), (byEvent.get(eventKey(d)) ?? 0) + 1);
  const seen = new Map([...byEvent].filter(([k]) => wanted.has(k)));
  expect(Object.fromEntries([...seen].sort()), "events received, each exactly once").toEqual(Object.fromEntries([...wanted].sort()));

  for (const { pinged, silent } of expected.heartbeats) {
    const live = await callApi(previous!.url, "GET", `/o/${OWNER.org}/heartbeats/${pinged}`, { token: owner });
    expectStatus(live, 200, `reading ${pinged}`);
    expect(live.body.status, pinged).toBe("ok");
    expect(live.body.lastSeenAt, pinged).not.toBeNull();
    const pings = await callApi(previous!.url, "GET", `/o/${OWNER.org}/heartbeats/${pinged}/pings`, { token: owner });
    expect(pings.body.pings, `the pings of ${pinged}`).toHaveLength(2);
    const quiet = await callApi(previous!.url, "GET", `/o/${OWNER.org}/heartbeats/${silent}`, { token: owner });
    expect(quiet.body.status, silent).toBe("silent");
    expect(quiet.body.lastSeenAt, silent).toBeNull();
  }
}

// The bound allows an install of the release's dependencies (minutes, once) when they differ from ours.
beforeAll(async () => {
  const release = previousRelease();
  // Fails, saying to fetch the history, when the clone does not hold the release's commit.
  tree = await prepareReleaseTree(release);
  measured.release = `${release.version} (${release.commit.slice(0, 12)})`;
  measured["release dependencies"] = tree.dependencies;
  measured["release tree prepared ms"] = tree.preparedMs;
  [database, nats] = await Promise.all([freshDatabase(), startPrivateNats()]);
  certs = makeTestCertificates();
  receiver = await startWebhookReceiver(certs);
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
  natsClient = await connect({ servers: nats.url });
}, 900_000);

afterAll(async () => {
  await Promise.allSettled([stopVersion(current), stopVersion(previous)]);
  await sql?.end();
  await natsClient?.close();
  await receiver?.close();
  certs?.remove();
  await nats?.cleanup();
  await database?.drop();
  console.log(`upgrade test measured: ${JSON.stringify(measured)}`);
});

describe(`a rolling upgrade from the previous release, and a rollback to it`, () => {
  const everything: Expected = { alerts: [], heartbeats: [] };

  it("this version's migration command migrates the database, one line per service", { timeout: 120_000 }, () => {
    const started = Date.now();
    const run = spawnSync(process.execPath, ["--import", "tsx", "services/process/migrate.ts"], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: database.url, LOG_LEVEL: "info" },
      encoding: "utf8",
      timeout: 120_000,
    });
    measured["migrate ms"] = Date.now() - started;
    expect(run.status, run.stderr + run.stdout).toBe(0);
    const lines = run.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { service: string; applied: { id: number }[]; msg: string });
    expect(lines.map((l) => l.service)).toEqual(allMigrations.map((m) => m.schema));
    for (const line of lines) expect(line.applied.length).toBe(allMigrations.find((m) => m.schema === line.service)!.migrations.length);
  });

  // Bounds that detect a hang: both versions start (tens of seconds on two loaded cores) and settle.
  it("mixed versions: both serve at once, and what goes through either is kept exactly once", { timeout: 300_000 }, async () => {
    // This version leaves the migrations to the command; the previous release runs its own (all applied).
    [current, previous] = await Promise.all([
      startVersion("current", { MIGRATE_ON_START: "false" }),
      startVersion(`release ${tree.release.version}`, {}, tree.dir),
    ]);
    const login = await until("the owner's login", async () => {
      const res = await callApi(current!.url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
      return res.status === 200 ? (res.body.accessToken as string) : undefined;
    });
    owner = login;
    // A login through the previous release too, on the new schema (identity's migration 8).
    // A 503 or 504 says "send it again" (a login hashes for a few hundred milliseconds, which a
    // loaded machine can stretch past the call deadline): a client retries it, so does the test.
    let oldLogin = await callApi(previous.url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
    for (let retries = 0; (oldLogin.status === 503 || oldLogin.status === 504) && retries < 5; retries++) {
      oldLogin = await callApi(previous.url, "POST", "/auth/login", { body: { email: OWNER.email, password: OWNER.password, orgSlug: OWNER.org } });
    }
    expectStatus(oldLogin, 200, "logging in through the previous release");
    const issued = await callApi(previous.url, "POST", `/o/${OWNER.org}/triggers/ingest-token`, { token: owner });
    expect([200, 201]).toContain(issued.status);
    ingestToken = issued.body.token;
    expectStatus(await callApi(current.url, "PUT", `/o/${OWNER.org}/oncall/egress`, { token: owner, body: { enabled: true } }), 200, "turning egress on");
    subscriptionEndpoint = "upgrade";
    receiver.endpoint(subscriptionEndpoint, []);
    const subscribed = await callApi(previous.url, "POST", `/o/${OWNER.org}/subscriptions`, {
      token: owner,
      body: { url: receiver.url(subscriptionEndpoint), events: EVENTS, description: "upgrade check" },
    });
    expectStatus(subscribed, 201, "subscribing through the previous release");
    receiver.setSecrets(subscriptionEndpoint, [subscribed.body.secret]);

    const started = Date.now();
    const [alerts, heartbeats] = await Promise.all([
      Promise.all(
        Array.from({ length: ALERTS }, (_, i) => (i % 2 ? alertLife(previous!, current!, `mixed${i}`) : alertLife(current!, previous!, `mixed${i}`))),
      ),
      Promise.all(
        Array.from({ length: HEARTBEATS }, (_, i) =>
          i % 2 ? heartbeatLife(previous!, current!, `mixed${i}`) : heartbeatLife(current!, previous!, `mixed${i}`),
        ),
      ),
    ]);
    everything.alerts.push(...alerts);
    everything.heartbeats.push(...heartbeats);
    await checkExactlyOnce(everything);
    measured["mixed phase ms"] = Date.now() - started;
    measured["webhook posts after mixed phase"] = receiver.deliveries.length;
  });

  it("rollback: the previous release alone on the new schema keeps everything and loses nothing new", { timeout: 240_000 }, async () => {
    expect(previous, "the mixed phase started both versions").toBeDefined();
    await stopVersion(current);
    current = undefined;
    const started = Date.now();
    const alerts = await Promise.all(Array.from({ length: ALERTS }, (_, i) => alertLife(previous!, previous!, `rollback${i}`)));
    const heartbeats = await Promise.all(Array.from({ length: HEARTBEATS }, (_, i) => heartbeatLife(previous!, previous!, `rollback${i}`)));
    everything.alerts.push(...alerts);
    everything.heartbeats.push(...heartbeats);
    // Everything from both phases, read through the previous release alone.
    await checkExactlyOnce(everything);
    measured["rollback phase ms"] = Date.now() - started;
    measured["webhook posts in all"] = receiver.deliveries.length;
  });
});
