import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { connect } from "@nats-io/transport-node";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { freePort, type Cluster } from "../../services/process/cluster.js";
import { createNatsTransport } from "../../services/runtime/transport/nats-transport.js";
import { callApi, OWNER, startApp, type TestApp } from "../support/app.js";
import { startClusterApp } from "../support/cluster.js";
import { nodeArgsFor } from "../support/compiled-services.js";

/**
 * What the trigger and receiver end-to-end tests share: the two ways of running the service,
 * the organization's credentials, the fixtures and a few calls.
 */

export type Mode = "one process" | "separate processes over NATS";
/**
 * Under TEST_DATABASE=embedded the suites run in the default mode only: the separate processes of
 * a cluster share a Postgres server, never one process's embedded database.
 */
export const MODES: Mode[] = process.env.TEST_DATABASE === "embedded" ? ["one process"] : ["one process", "separate processes over NATS"];

/** workspaceUrl is `${PUBLIC_URL}/o/{org}/incidents/{id}`; fixed so the tests can say it exactly. */
export const PUBLIC_URL = "https://warroom.example.test";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface IntakeApp extends TestApp {
  mode: Mode;
  /** Every gateway: one in one-process mode, two in the cluster. */
  gatewayUrls: string[];
  cluster?: Cluster;
}

function secretsKey(): string {
  return `test:${randomBytes(32).toString("base64")}`;
}

/**
 * One process (in-memory transport), or every service as its own process over a private NATS
 * server: two gateways and `intakes` intake replicas. The private server keeps these processes
 * from answering (or being answered by) another test file's cluster on a shared NATS server.
 */
export async function startIntakeApp(mode: Mode, options: { intakes?: number; env?: Record<string, string> } = {}): Promise<IntakeApp> {
  const env = { PUBLIC_URL, SECRETS_KEYS: secretsKey(), ...options.env };
  if (mode === "one process") {
    const app = await startApp({ env });
    return { ...app, mode, gatewayUrls: [app.url] };
  }
  const app = await startClusterApp({ env, intakes: options.intakes ?? 2 });
  return { ...app, mode };
}

/** Starts one service of a running cluster again as its own process; resolves when it is ready. */
export async function startClusterProcess(app: IntakeApp, name: string): Promise<ChildProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, nodeArgsFor(join(repoRoot, "services", name, "main.ts")), {
    env: { ...app.cluster!.env, PORT: String(port), SERVICE_INSTANCE: `${name}-again` },
    stdio: "ignore",
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with code ${child.exitCode} while starting`);
    const ok = await fetch(`http://127.0.0.1:${port}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return child;
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${name} did not become ready`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Kills a child process at once (no drain) and waits for it to be gone. */
export async function killChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGKILL");
  await exited;
}

export interface Credentials {
  owner: string;
  ingestToken: string;
  alertRouterSecret: string;
  chatSecret: string;
}

/** Logs the owner in and issues the organization's ingest token and receiver secrets. */
export async function issueCredentials(app: TestApp, org = OWNER.org, owner?: string): Promise<Credentials> {
  const token = owner ?? (await app.ownerToken());
  const issue = async (path: string, field: "token" | "secret") => {
    const res = await app.call("POST", `/o/${org}/triggers/${path}`, { token });
    if (res.status !== 200 && res.status !== 201) throw new Error(`issuing ${path} failed: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body[field] as string;
  };
  return {
    owner: token,
    ingestToken: await issue("ingest-token", "token"),
    alertRouterSecret: await issue("alertrouter-secret", "secret"),
    chatSecret: await issue("chat-secret", "secret"),
  };
}

/** A fixture from test/fixtures, parsed, as a fresh copy each time. */
export function fixture(path: string): any {
  return JSON.parse(readFileSync(join(repoRoot, "test", "fixtures", path), "utf8"));
}

export function fixtureText(path: string): string {
  return readFileSync(join(repoRoot, "test", "fixtures", path), "utf8");
}

let counter = 0;
/** A value no other test in the run uses. */
export function unique(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${(++counter).toString(36)}-${randomBytes(3).toString("hex")}`;
}

export interface Answer {
  status: number;
  body: any;
  headers: Headers;
}

/** POST /triggers with the ingest token (or none), JSON unless `raw` is given. */
export function postTrigger(
  app: TestApp,
  token: string | undefined,
  body: unknown,
  options: { raw?: string | Buffer; contentType?: string; url?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.contentType) headers["content-type"] = options.contentType;
  const raw = options.raw ?? (body === undefined ? undefined : JSON.stringify(body));
  if (raw !== undefined && !options.contentType) headers["content-type"] = "application/json";
  return callApi(options.url ?? app.url, "POST", "/triggers", { token, headers, raw });
}

export async function getIncident(app: TestApp, token: string, id: string): Promise<any> {
  const res = await app.call("GET", `/o/${OWNER.org}/incidents/${id}`, { token });
  if (res.status !== 200) throw new Error(`GET incident ${id}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

export async function listIncidents(app: TestApp, token: string, state?: string): Promise<any[]> {
  const query = state ? `?state=${state}&limit=1000` : "?limit=1000";
  const res = await app.call("GET", `/o/${OWNER.org}/incidents${query}`, { token });
  if (res.status !== 200) throw new Error(`GET incidents: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.incidents as any[];
}

export async function resolveIncident(app: TestApp, token: string, id: string, action: "resolve" | "archive" = "resolve"): Promise<void> {
  const res = await app.call("POST", `/o/${OWNER.org}/incidents/${id}/${action}`, { token });
  if (res.status !== 200) throw new Error(`${action} ${id}: ${res.status} ${JSON.stringify(res.body)}`);
}

/** Runs `body` while a maintenance window with `match` is active, and deletes it afterwards. */
export async function duringMaintenance<T>(
  app: TestApp,
  token: string,
  match: { sources?: string[]; entities?: { kind: string; id: string }[] } | undefined,
  body: (windowId: string) => Promise<T>,
): Promise<T> {
  const now = Date.now();
  const created = await app.call("POST", `/o/${OWNER.org}/maintenance-windows`, {
    token,
    body: {
      startsAt: new Date(now - 60_000).toISOString(),
      endsAt: new Date(now + 3_600_000).toISOString(),
      reason: "planned work",
      ...(match ? { match } : {}),
    },
  });
  if (created.status !== 201 && created.status !== 200) throw new Error(`maintenance window: ${created.status} ${JSON.stringify(created.body)}`);
  const remove = async () => {
    const deleted = await app.call("DELETE", `/o/${OWNER.org}/maintenance-windows/${created.body.id}`, { token });
    if (deleted.status !== 204) throw new Error(`deleting the maintenance window: ${deleted.status}`);
  };
  let result: T;
  try {
    result = await body(created.body.id as string);
  } catch (err) {
    // The body's failure is the one to report; a failed clean-up after it would only hide it.
    await remove().catch(() => undefined);
    throw err;
  }
  await remove();
  return result;
}

/** The organization's audit events of `kind`, waiting up to `timeoutMs` for `until` to hold. */
export async function auditEvents(
  app: TestApp,
  token: string,
  kind: string,
  until: (events: any[]) => boolean = (events) => events.length > 0,
  timeoutMs = 10_000,
  org = OWNER.org,
): Promise<any[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await app.call("GET", `/o/${org}/audit-events?limit=1000`, { token });
    if (res.status !== 200) throw new Error(`GET audit-events: ${res.status} ${JSON.stringify(res.body)}`);
    const events = (res.body.events as any[]).filter((event) => event.kind === kind);
    // Audit records written by other services arrive through their outbox, a moment later.
    if (until(events) || Date.now() > deadline) return events;
    await new Promise((r) => setTimeout(r, 100));
  }
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** What a suite reads once its file's beforeAll has started the app. */
export interface SuiteContext {
  app: IntakeApp;
  creds: Credentials;
}

/**
 * A second organization with its own owner and credentials, created the way an operator does
 * (the identity service's Bootstrap), over the app's own transport.
 */
export async function bootstrapOrg(app: IntakeApp, slug: string): Promise<Credentials> {
  const owner = { email: `owner@${slug}.test`, password: "another horse battery" };
  const call = async (transport: Parameters<typeof createClient>[1]) =>
    createClient(IdentityService, transport).bootstrap({ orgSlug: slug, ownerEmail: owner.email, ownerPassword: owner.password });
  if (app.natsUrl) {
    const nc = await connect({ servers: app.natsUrl });
    try {
      await call(createNatsTransport(nc));
    } finally {
      await nc.close();
    }
  } else {
    await call(app.process.transport);
  }
  const login = await app.call("POST", "/auth/login", { body: { ...owner, orgSlug: slug } });
  if (login.status !== 200) throw new Error(`login to ${slug} failed: ${login.status}`);
  return issueCredentials(app, slug, login.body.accessToken as string);
}
