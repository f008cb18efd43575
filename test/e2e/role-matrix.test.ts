import { randomUUID } from "node:crypto";
import { createClient } from "@connectrpc/connect";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { buildRouteTable, type Route } from "../../services/gateway/route-table.js";
import { internalServices } from "../../services/runtime/transport/clients.js";
import { createNatsTransport } from "../../services/runtime/transport/nats-transport.js";
import { startApp, type TestApp } from "../support/app.js";
import { startClusterApp } from "../support/cluster.js";

/**
 * Every management route, read from the same route table the gateway serves, against every kind
 * of caller: no credential (401), another organization's admin (403, never data), a member on an
 * admin route (403), and the roles that may (anything but 401/403: the call reached the handler).
 * A route added later fails here until it is classified below.
 */
const ADMIN_ONLY = new Set([
  "AddMember",
  "UpdateMember",
  "RemoveMember",
  "SetMemberPassword",
  "IssueIngestToken",
  "IssueChatSecret",
  "IssueAlertRouterSecret",
  "ListAuditEvents",
  "CreateMaintenanceWindow",
  "DeleteMaintenanceWindow",
  "EndMaintenanceWindow",
  "PutEscalationPolicy",
  "RegisterHeartbeat",
  "UpdateHeartbeat",
  "DeleteHeartbeat",
  "RotateHeartbeatPingKey",
  "IssueOrgPingKey",
  "SetEgress",
  "SetCommsSettings",
  "SaveChatWebhook",
  "TestChatWebhook",
  "DeleteChatWebhook",
  "CreateRemoteSource",
  "UpdateRemoteSource",
  "DeleteRemoteSource",
  "TestRemoteSource",
  "SetInvestigationReads",
  "CreateSubscription",
  "UpdateSubscription",
  "DeleteSubscription",
  "RotateSubscriptionSecret",
  "SendTestEvent",
  "RedeliverMessage",
  "RedeliverSince",
  "CreateCustomSource",
  "UpdateCustomSource",
  "DeleteCustomSource",
  "RotateCustomSourceCredential",
  "RevokeCustomSourceCredential",
  "ListCustomSourceDeliveries",
  "ListCustomSourcePayloads",
  "PreviewCustomSource",
  "PutGroupingOverride",
  "DeleteGroupingOverride",
  "PutCorrelation",
  "DeleteCorrelation",
  "ExportConfig",
  "ApplyConfig",
]);
const ANY_MEMBER = new Set([
  "ListMembers",
  "ListApiKeys",
  "ListIncidents",
  "GetIncident",
  "ListTimeline",
  "ResolveIncident",
  "ArchiveIncident",
  "UpdateIncident",
  "AcknowledgeIncident",
  "SetIncidentOwner",
  "AddIncidentNote",
  "BulkUpdateIncidents",
  "ListMaintenanceWindows",
  "GetEscalationPolicy",
  "ListHeartbeats",
  "GetHeartbeat",
  "ListPings",
  "GetEgress",
  "DraftMessage",
  "ListMessages",
  "ApproveMessage",
  "EditMessage",
  "DiscardMessage",
  "GetCommsSettings",
  "SendMessage",
  "GetChatWebhook",
  "ListRemoteSources",
  "GetRemoteSource",
  "ReadRemoteSource",
  "ListEvidence",
  "Investigate",
  "ListSubscriptions",
  "GetSubscription",
  "ListDeliveries",
  "ListCustomSources",
  "ListCustomSourcePresets",
  "GetCustomSource",
  "ListGroupingOverrides",
  "GetCorrelation",
]);
/** Any member, but only with a session: an API key never mints another key. */
/** Credentials change only with a session: a stolen key must not take its owner's account over. */
const SESSION_ONLY = new Set(["CreateApiKey", "DeleteApiKey", "ChangeOwnPassword"]);
/**
 * Authenticated otherwise (login, the trigger endpoints by token or secret, pings by ingest token,
 * the PagerDuty and Opsgenie receivers by routing key or GenieKey, a custom source by its own
 * credential): tested in their own suites.
 */
const OWN_AUTHENTICATION = new Set([
  "Login",
  "Logout",
  "Deliver",
  "DeliverAlertRouter",
  "DeliverChat",
  "Ping",
  "PingSignal",
  "PingByKey",
  "PingByKeySignal",
  "PingOpsgenieHeartbeat",
  "EnqueuePagerDutyEvent",
  "EnqueuePagerDutyV1Event",
  "EnqueuePagerDutyChange",
  "CreateOpsgenieAlert",
  "CloseOpsgenieAlert",
  "AcknowledgeOpsgenieAlert",
  "GetOpsgenieRequestStatus",
  "DeliverCustomSource",
  "DeliverCustomSourceWithPathSecret",
]);

const routes = buildRouteTable(internalServices);

function pathFor(route: Route, org: string): string {
  return route.template.replace(/\{([a-z_]+)\}/g, (_, name: string) =>
    name === "org" ? org : name === "name" || name === "heartbeat" ? "probe" : randomUUID(),
  );
}

describe("every route is classified", () => {
  it("has a role rule for every public method", () => {
    const unclassified = routes
      .map((r) => r.method.name)
      .filter((n) => !ADMIN_ONLY.has(n) && !ANY_MEMBER.has(n) && !SESSION_ONLY.has(n) && !OWN_AUTHENTICATION.has(n));
    expect(unclassified).toEqual([]);
  });
});

describe.each(["one process", "separate processes over NATS"] as const)("the role matrix over every management route (%s)", (mode) => {
  let app: TestApp;
  let nc: NatsConnection | undefined;
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    app = mode === "one process" ? await startApp() : await startClusterApp();
    tokens.owner = await app.ownerToken();
    for (const role of ["admin", "member"]) {
      expect(
        (await app.call("POST", "/o/acme/members", { token: tokens.owner, body: { email: `${role}@acme.test`, password: "password-123", role } })).status,
      ).toBe(201);
      tokens[role] = (
        await app.call("POST", "/auth/login", { body: { email: `${role}@acme.test`, password: "password-123", orgSlug: "acme" } })
      ).body.accessToken;
    }
    tokens.memberApiKey = (await app.call("POST", "/o/acme/api-keys", { token: tokens.member, body: { name: "probe" } })).body.key;
    // A second organization and its owner, through the bootstrap path the admin CLI uses.
    nc = app.natsUrl ? await connect({ servers: app.natsUrl }) : undefined;
    const identity = createClient(IdentityService, nc ? createNatsTransport(nc) : app.process.transport);
    await identity.bootstrap({ orgSlug: "globex", ownerEmail: "boss@globex.test", ownerPassword: "password-123" });
    tokens.otherOrgOwner = (
      await app.call("POST", "/auth/login", { body: { email: "boss@globex.test", password: "password-123", orgSlug: "globex" } })
    ).body.accessToken;
  }, 180_000);

  afterAll(async () => {
    await nc?.close();
    await app?.stop();
  });

  const managed = routes.filter((r) => !OWN_AUTHENTICATION.has(r.method.name));

  it("answers 401 to a call without a credential, on every route", async () => {
    for (const route of managed) {
      const res = await app.call(route.httpMethod, pathFor(route, "acme"), { body: route.body === "*" ? {} : undefined });
      expect({ route: `${route.httpMethod} ${route.template}`, status: res.status }).toEqual({ route: `${route.httpMethod} ${route.template}`, status: 401 });
    }
  });

  it("never lets one organization's credential act on another's: 403, never data", async () => {
    for (const route of managed) {
      const label = `${route.httpMethod} ${route.template}`;
      // globex's owner on acme, and acme's owner on an organization that does not exist: the same answer.
      for (const [token, org] of [
        [tokens.otherOrgOwner, "acme"],
        [tokens.owner, "no-such-org"],
      ] as const) {
        const res = await app.call(route.httpMethod, pathFor(route, org), { token, body: route.body === "*" ? {} : undefined });
        expect({ label, org, status: res.status }).toEqual({ label, org, status: 403 });
        expect(Object.keys(res.body ?? {})).toEqual(["error"]);
      }
    }
  });

  it("refuses a member on every admin route, and lets owners and admins through", async () => {
    for (const route of managed.filter((r) => ADMIN_ONLY.has(r.method.name))) {
      const label = `${route.httpMethod} ${route.template}`;
      const asMember = await app.call(route.httpMethod, pathFor(route, "acme"), { token: tokens.member, body: route.body === "*" ? {} : undefined });
      expect({ label, status: asMember.status }).toEqual({ label, status: 403 });
      for (const role of ["admin", "owner"]) {
        const res = await app.call(route.httpMethod, pathFor(route, "acme"), { token: tokens[role], body: route.body === "*" ? {} : undefined });
        expect({ label, role, refused: res.status === 401 || res.status === 403 }).toEqual({ label, role, refused: false });
      }
    }
  });

  it("lets every member through on member routes, with a session or a personal API key", async () => {
    for (const route of managed.filter((r) => ANY_MEMBER.has(r.method.name))) {
      const label = `${route.httpMethod} ${route.template}`;
      for (const token of [tokens.member, tokens.memberApiKey]) {
        const res = await app.call(route.httpMethod, pathFor(route, "acme"), { token, body: route.body === "*" ? {} : undefined });
        expect({ label, refused: res.status === 401 || res.status === 403 }).toEqual({ label, refused: false });
      }
    }
  });

  it("lets every member through on session-only routes with a session, and refuses an API key", async () => {
    for (const route of managed.filter((r) => SESSION_ONLY.has(r.method.name))) {
      const label = `${route.httpMethod} ${route.template}`;
      const withSession = await app.call(route.httpMethod, pathFor(route, "acme"), { token: tokens.member, body: route.body === "*" ? {} : undefined });
      expect({ label, refused: withSession.status === 401 || withSession.status === 403 }).toEqual({ label, refused: false });
      const withKey = await app.call(route.httpMethod, pathFor(route, "acme"), { token: tokens.memberApiKey, body: route.body === "*" ? {} : undefined });
      expect({ label, status: withKey.status }).toEqual({ label, status: 403 });
    }
  });
});
