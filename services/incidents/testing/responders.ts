import { createClient, type Client } from "@connectrpc/connect";
import postgres from "postgres";
import { expect } from "vitest";
import { IdentityService } from "../../../gen/warroom/identity/v1/identity_pb.js";
import { IncidentsService } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, startApp, type TestApp } from "../../../test/support/app.js";

/** A second organization, for the tests that one organization's responders never reach another's. */
export const OTHER = { org: "umbrella", email: "owner@umbrella.test", password: "a different horse" };

/** A running service with the people a responder's actions are tried by. */
export interface Responders {
  app: TestApp;
  /** The incident core's own client, as intake and the gateway call it. */
  internal: Client<typeof IncidentsService>;
  orgId: string;
  ownerToken: string;
  /** A member of OWNER's organization, "responder@acme.test". */
  memberId: string;
  memberToken: string;
  otherOrgId: string;
  otherOrgToken: string;
  db: postgres.Sql;
  stop(): Promise<void>;
}

export async function login(app: TestApp, email: string, password: string, orgSlug: string): Promise<string> {
  const res = await app.call("POST", "/auth/login", { body: { email, password, orgSlug } });
  expect(res.status).toBe(200);
  return res.body.accessToken;
}

export async function startResponders(): Promise<Responders> {
  const app = await startApp();
  const internal = createClient(IncidentsService, app.process.transport);
  const identity = createClient(IdentityService, app.process.transport);
  const orgId = (await identity.getOrganization({ slug: OWNER.org })).id;
  const ownerToken = await app.ownerToken();
  const added = await app.call("POST", `/o/${OWNER.org}/members`, {
    token: ownerToken,
    body: { email: "responder@acme.test", password: "responder password", role: "member" },
  });
  expect(added.status).toBe(201);
  const memberToken = await login(app, "responder@acme.test", "responder password", OWNER.org);
  await identity.bootstrap({ orgSlug: OTHER.org, ownerEmail: OTHER.email, ownerPassword: OTHER.password });
  const otherOrgId = (await identity.getOrganization({ slug: OTHER.org })).id;
  const otherOrgToken = await login(app, OTHER.email, OTHER.password, OTHER.org);
  const db = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  return {
    app,
    internal,
    orgId,
    ownerToken,
    memberId: added.body.id,
    memberToken,
    otherOrgId,
    otherOrgToken,
    db,
    async stop() {
      await db.end();
      await app.stop();
    },
  };
}
