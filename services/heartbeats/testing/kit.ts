import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { HeartbeatsService } from "../../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { IdentityService } from "../../../gen/warroom/identity/v1/identity_pb.js";
import type { TestApp } from "../../../test/support/app.js";

/** The people and credentials the heartbeat tests act with. */
export interface Cast {
  owner: string;
  admin: string;
  member: string;
  /** An admin of another organization (globex). */
  otherAdmin: string;
  ingestToken: string;
  otherIngestToken: string;
}

const PASSWORD = "a long enough password";

async function login(app: TestApp, email: string, password: string, orgSlug: string): Promise<string> {
  const res = await app.call("POST", "/auth/login", { body: { email, password, orgSlug } });
  if (res.status !== 200) throw new Error(`login of ${email} failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.accessToken as string;
}

async function addMember(app: TestApp, token: string, org: string, email: string, role: string): Promise<void> {
  const res = await app.call("POST", `/o/${org}/members`, { token, body: { email, password: PASSWORD, role } });
  if (res.status !== 201 && res.status !== 200) throw new Error(`adding ${email} failed: ${res.status} ${JSON.stringify(res.body)}`);
}

async function issueIngestToken(app: TestApp, token: string, org: string): Promise<string> {
  const res = await app.call("POST", `/o/${org}/triggers/ingest-token`, { token });
  if (res.status !== 200 && res.status !== 201) throw new Error(`ingest token for ${org} failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.token as string;
}

/** Members of acme in every role, an admin of a second organization, and both ingest tokens. */
export async function castOf(app: TestApp): Promise<Cast> {
  const owner = await app.ownerToken();
  await addMember(app, owner, "acme", "admin@acme.test", "admin");
  await addMember(app, owner, "acme", "member@acme.test", "member");
  const identity = createClient(IdentityService, app.process.transport);
  await identity.bootstrap({ orgSlug: "globex", ownerEmail: "owner@globex.test", ownerPassword: PASSWORD });
  const globexOwner = await login(app, "owner@globex.test", PASSWORD, "globex");
  await addMember(app, globexOwner, "globex", "admin@globex.test", "admin");
  return {
    owner,
    admin: await login(app, "admin@acme.test", PASSWORD, "acme"),
    member: await login(app, "member@acme.test", PASSWORD, "acme"),
    otherAdmin: await login(app, "admin@globex.test", PASSWORD, "globex"),
    ingestToken: await issueIngestToken(app, owner, "acme"),
    otherIngestToken: await issueIngestToken(app, globexOwner, "globex"),
  };
}

/** The internal client: Sweep is not on the public port. */
export function heartbeatsClient(transport: Transport): Client<typeof HeartbeatsService> {
  return createClient(HeartbeatsService, transport);
}

/**
 * Posts a plain ping to a heartbeat of the test app, with the ingest token when given; resolves
 * with the answer's status, text and content type.
 */
export async function ping(
  app: TestApp,
  name: string,
  ingestToken: string | undefined,
  org = "acme",
): Promise<{ status: number; text: string; contentType: string | null }> {
  const headers: Record<string, string> = {};
  if (ingestToken !== undefined) headers.authorization = `Bearer ${ingestToken}`;
  const res = await fetch(`${app.url}/o/${org}/heartbeats/${encodeURIComponent(name)}/ping`, { method: "POST", headers });
  return { status: res.status, text: await res.text(), contentType: res.headers.get("content-type") };
}

/**
 * How long `eventually` polls before it gives up: a hang bound, many times what the work takes,
 * never a budget it must meet (a loaded machine is slow, not wrong; timings belong in the benches).
 */
const HANG_MS = 60_000;

/** Polls until `check` returns a value (not undefined), or fails after the hang bound. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>): Promise<T> {
  const until = Date.now() + HANG_MS;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error(`timed out after ${HANG_MS} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
