import { randomBytes } from "node:crypto";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, startApp, type TestApp } from "../../test/support/app.js";

/**
 * Reviewing an update before it leaves, over every public surface: the times of each step, edit
 * and discard of a draft, and the organization's setting that a second person must approve,
 * enforced by the service.
 */

let app: TestApp;
let orgId: string;
let owner: string;
let admin: string;
let member: string;
const SETTINGS = "/o/acme/comms/settings";

async function login(email: string, password: string): Promise<string> {
  const res = await app.call("POST", "/auth/login", { body: { email, password, orgSlug: OWNER.org } });
  expect(res.status).toBe(200);
  return res.body.accessToken;
}

beforeAll(async () => {
  app = await startApp();
  orgId = (await createClient(IdentityService, app.process.transport).getOrganization({ slug: OWNER.org })).id;
  owner = await app.ownerToken();
  for (const role of ["admin", "member"]) {
    expect((await app.call("POST", "/o/acme/members", { token: owner, body: { email: `${role}@acme.test`, password: `${role} password`, role } })).status).toBe(
      201,
    );
  }
  admin = await login("admin@acme.test", "admin password");
  member = await login("member@acme.test", "member password");
});

afterAll(async () => {
  await app?.stop();
});

async function openIncident(): Promise<string> {
  const res = await createClient(IncidentsService, app.process.transport).record({
    orgId,
    orgSlug: OWNER.org,
    alert: { source: "metrics-monitor", attachIdentity: `review-${randomBytes(6).toString("hex")}`, kind: "alert", title: "Checkout errors", severity: "sev2" },
  });
  expect(res.outcome).toBe("opened");
  return res.incident!.id;
}

const messages = (incidentId: string) => `/o/acme/incidents/${incidentId}/comms/messages`;

async function draft(incidentId: string, body: string, token: string): Promise<{ messageId: string; version: string }> {
  const res = await app.call("POST", messages(incidentId), { token, body: { channel: "chatwebhook", body } });
  expect(res.status).toBe(201);
  return res.body;
}

async function list(incidentId: string): Promise<any[]> {
  return (await app.call("GET", messages(incidentId), { token: owner })).body.messages;
}

function client(kind: "connect" | "grpc", token: string): Client<typeof CommsService> {
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport =
    kind === "grpc"
      ? createGrpcTransport({ baseUrl: app.url, interceptors: [bearer] })
      : createConnectTransport({ baseUrl: app.url, httpVersion: "1.1", interceptors: [bearer] });
  return createClient(CommsService, transport);
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return "OK";
  } catch (err) {
    return Code[ConnectError.from(err).code];
  }
}

describe("times, edit and discard", () => {
  it("stamps each step: drafted, edited, approved, sent, each with who", async () => {
    const incident = await openIncident();
    const drafted = await draft(incident, "Investigating", member);
    const edited = await app.call("PATCH", `${messages(incident)}/${drafted.messageId}`, {
      token: admin,
      body: { version: drafted.version, body: "Investigating checkout errors" },
    });
    expect(edited.status).toBe(200);
    expect(edited.body).toEqual({ messageId: drafted.messageId, version: String(Number(drafted.version) + 1) });
    const approved = await app.call("POST", `${messages(incident)}/${drafted.messageId}/approve`, { token: owner, body: { version: edited.body.version } });
    expect(approved.status).toBe(200);
    expect((await app.call("POST", `${messages(incident)}/${drafted.messageId}/send`, { token: owner })).body.state).toBe("simulated");

    const [message] = await list(incident);
    expect(message).toMatchObject({ body: "Investigating checkout errors", state: "simulated", draftedBy: "member@acme.test", editedBy: "admin@acme.test" });
    expect(message.approvedBy).toBe(OWNER.email);
    expect(message.sentBy).toBe(OWNER.email);
    const times = [message.draftedAt, message.editedAt, message.approvedAt, message.sentAt].map((t: string) => Date.parse(t));
    expect(times.every(Number.isFinite)).toBe(true);
    expect([...times].sort((a, b) => a - b)).toEqual(times);
  });

  it("edits only a draft at its version, and discards only a draft", async () => {
    const incident = await openIncident();
    const first = await draft(incident, "First words", member);
    const stale = await app.call("PATCH", `${messages(incident)}/${first.messageId}`, { token: member, body: { version: "99", body: "x" } });
    expect(stale.status).toBe(409);
    expect(stale.body.error).toBe(`stale version 99: message ${first.messageId} is at version 1; read it again and edit what you read`);
    const empty = await app.call("PATCH", `${messages(incident)}/${first.messageId}`, { token: member, body: { version: first.version, body: "  " } });
    expect(empty.status).toBe(400);

    const discarded = await app.call("DELETE", `${messages(incident)}/${first.messageId}?version=${first.version}`, { token: member });
    expect(discarded.status).toBe(204);
    expect((await list(incident))[0]).toMatchObject({ messageId: first.messageId, state: "discarded" });
    const approve = await app.call("POST", `${messages(incident)}/${first.messageId}/approve`, { token: owner, body: { version: "2" } });
    expect(approve.status).toBe(409);
    expect(approve.body.error).toBe(`message ${first.messageId} is already discarded; only a draft can be approved`);
    const again = await app.call("DELETE", `${messages(incident)}/${first.messageId}`, { token: member });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe(`message ${first.messageId} is already discarded; only a draft can be discarded`);

    const second = await draft(incident, "Second words", member);
    const version = (await app.call("POST", `${messages(incident)}/${second.messageId}/approve`, { token: member, body: { version: second.version } })).body
      .version;
    const late = await app.call("PATCH", `${messages(incident)}/${second.messageId}`, { token: member, body: { version, body: "changed" } });
    expect(late.status).toBe(409);
    expect(late.body.error).toBe(`message ${second.messageId} is already approved; only a draft can be edited: draft a new update`);
  });

  it("edits and discards over Connect and gRPC", async () => {
    for (const kind of ["connect", "grpc"] as const) {
      const incident = await openIncident();
      const drafted = await draft(incident, `via ${kind}`, member);
      const edited = await client(kind, member).editMessage({
        org: "acme",
        incidentId: incident,
        messageId: drafted.messageId,
        version: drafted.version,
        body: "edited",
      });
      expect(edited.version, kind).toBe("2");
      await client(kind, member).discardMessage({ org: "acme", incidentId: incident, messageId: drafted.messageId, version: "2" });
      expect((await list(incident))[0].state, kind).toBe("discarded");
      expect(
        await codeOf(client(kind, member).editMessage({ org: "acme", incidentId: incident, messageId: drafted.messageId, version: "3", body: "x" })),
        kind,
      ).toBe("Aborted");
    }
  });
});

describe("a second person must approve", () => {
  it("is off by default, changed only by an admin, and audited", async () => {
    expect((await app.call("GET", SETTINGS, { token: member })).body).toEqual({ requireSecondApprover: false });
    const refused = await app.call("PUT", SETTINGS, { token: member, body: { requireSecondApprover: true } });
    expect(refused.status).toBe(403);
    const set = await app.call("PUT", SETTINGS, { token: admin, body: { requireSecondApprover: true } });
    expect(set.status).toBe(200);
    expect(set.body).toEqual({ requireSecondApprover: true });
    await expect
      .poll(async () => (await app.call("GET", "/o/acme/audit-events", { token: owner })).body.events)
      .toContainEqual(
        expect.objectContaining({ kind: "comms.approval.changed", actor: "admin@acme.test", data: { requireSecondApprover: true, previous: false } }),
      );
  });

  it("refuses the drafter's and the last editor's own approval on every surface, and takes a second person's", async () => {
    expect((await app.call("PUT", SETTINGS, { token: owner, body: { requireSecondApprover: true } })).status).toBe(200);
    const incident = await openIncident();
    const drafted = await draft(incident, "We are rolling back", member);
    const own = await app.call("POST", `${messages(incident)}/${drafted.messageId}/approve`, { token: member, body: { version: drafted.version } });
    expect(own.status).toBe(403);
    expect(own.body.error).toBe(
      "this organization requires a second person to approve an update (comms setting requireSecondApprover): ask another member to approve it, or an admin to change the setting at PUT /o/acme/comms/settings",
    );
    for (const kind of ["connect", "grpc"] as const) {
      expect(
        await codeOf(client(kind, member).approveMessage({ org: "acme", incidentId: incident, messageId: drafted.messageId, version: drafted.version })),
        kind,
      ).toBe("PermissionDenied");
    }
    // Whoever edited the draft last wrote what would be sent: they may not approve it either.
    const edited = await app.call("PATCH", `${messages(incident)}/${drafted.messageId}`, {
      token: admin,
      body: { version: drafted.version, body: "We rolled back" },
    });
    expect(
      (await app.call("POST", `${messages(incident)}/${drafted.messageId}/approve`, { token: admin, body: { version: edited.body.version } })).status,
    ).toBe(403);
    const second = await client("grpc", owner).approveMessage({
      org: "acme",
      incidentId: incident,
      messageId: drafted.messageId,
      version: edited.body.version,
    });
    expect(second.state).toBe("approved");

    expect((await app.call("PUT", SETTINGS, { token: owner, body: { requireSecondApprover: false } })).status).toBe(200);
    const mine = await draft(incident, "All clear", member);
    expect((await app.call("POST", `${messages(incident)}/${mine.messageId}/approve`, { token: member, body: { version: mine.version } })).status).toBe(200);
  });
});
