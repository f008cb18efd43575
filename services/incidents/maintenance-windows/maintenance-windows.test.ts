import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient, type Client } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { IdentityService } from "../../../gen/warroom/identity/v1/identity_pb.js";
import { AlertSchema, IncidentsService } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { OWNER, startApp, type TestApp } from "../../../test/support/app.js";

/** Maintenance windows over real HTTP, and the suppression they cause in Record. */

let app: TestApp;
let client: Client<typeof IncidentsService>;
let orgId: string;
let ownerToken: string;
let adminToken: string;
let memberToken: string;
let otherOrgToken: string;

const OTHER = { org: "initech", email: "owner@initech.test", password: "yet another horse" };
const PATH = `/o/${OWNER.org}/maintenance-windows`;
const created: string[] = [];

async function login(email: string, password: string, orgSlug: string): Promise<string> {
  const res = await app.call("POST", "/auth/login", { body: { email, password, orgSlug } });
  expect(res.status).toBe(200);
  return res.body.accessToken;
}

beforeAll(async () => {
  app = await startApp();
  client = createClient(IncidentsService, app.process.transport);
  const identity = createClient(IdentityService, app.process.transport);
  orgId = (await identity.getOrganization({ slug: OWNER.org })).id;
  ownerToken = await app.ownerToken();
  for (const role of ["admin", "member"]) {
    const res = await app.call("POST", `/o/${OWNER.org}/members`, {
      token: ownerToken,
      body: { email: `${role}@acme.test`, password: `${role} password`, role },
    });
    expect(res.status).toBe(201);
  }
  adminToken = await login("admin@acme.test", "admin password", OWNER.org);
  memberToken = await login("member@acme.test", "member password", OWNER.org);
  await identity.bootstrap({ orgSlug: OTHER.org, ownerEmail: OTHER.email, ownerPassword: OTHER.password });
  otherOrgToken = await login(OTHER.email, OTHER.password, OTHER.org);
});

afterEach(async () => {
  // Windows are organization-wide: none may outlive the test that made it.
  while (created.length > 0) {
    await app.call("DELETE", `${PATH}/${created.pop()}`, { token: ownerToken });
  }
});

afterAll(async () => {
  await app?.stop();
});

const minutesFromNow = (minutes: number) => new Date(Date.now() + minutes * 60_000).toISOString();

async function createWindow(body: Record<string, unknown>, token = adminToken) {
  const res = await app.call("POST", PATH, { token, body: { startsAt: minutesFromNow(-1), endsAt: minutesFromNow(60), reason: "database upgrade", ...body } });
  if (res.status === 201) created.push(res.body.id);
  return res;
}

let sequence = 0;
function deliver(init: Partial<MessageInitShape<typeof AlertSchema>> = {}) {
  return client.record({
    orgId,
    orgSlug: OWNER.org,
    alert: create(AlertSchema, {
      source: "metrics-monitor",
      kind: "alert",
      attachIdentity: `metrics-monitor:mw:${++sequence}`,
      eventId: `e-${sequence}`,
      title: `Alert ${sequence}`,
      severity: "sev2",
      ...init,
    }),
  });
}

async function openIncidentCount(): Promise<number> {
  const res = await app.call("GET", `/o/${OWNER.org}/incidents?state=open&limit=1000`, { token: memberToken });
  return res.body.incidents.length;
}

describe("POST /o/{org}/maintenance-windows", () => {
  it("creates a window for an admin: 201 echoing its fields plus id", async () => {
    const startsAt = "2099-01-01T02:00:00Z";
    const endsAt = "2099-01-01T04:30:00Z";
    const res = await createWindow({
      startsAt,
      endsAt,
      reason: "  quarterly failover test ",
      match: { sources: ["metrics-monitor", "cloud-monitor", "metrics-monitor"], entities: [{ kind: "service", id: "checkout" }] },
    });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      startsAt,
      endsAt,
      reason: "quarterly failover test",
      match: { sources: ["metrics-monitor", "cloud-monitor"], entities: [{ kind: "service", id: "checkout" }] },
    });
  });

  it("creates a window without match as covering everything", async () => {
    const res = await createWindow({}, ownerToken);
    expect(res.status).toBe(201);
    expect(res.body.match).toEqual({ sources: [], entities: [] });
  });

  it("answers 401 without a credential, 403 for a member and for another organization's credential", async () => {
    expect((await app.call("POST", PATH, { body: { startsAt: minutesFromNow(0), endsAt: minutesFromNow(5), reason: "x" } })).status).toBe(401);
    const member = await createWindow({}, memberToken);
    expect(member.status).toBe(403);
    expect(member.body.error).toContain("admin");
    expect((await createWindow({}, otherOrgToken)).status).toBe(403);
  });

  it("refuses invalid windows with 400 and a message naming the field", async () => {
    // One instant for both ends: two readings of the clock can be a millisecond apart.
    const inTenMinutes = minutesFromNow(10);
    const cases: [Record<string, unknown>, string][] = [
      [{ startsAt: inTenMinutes, endsAt: minutesFromNow(5) }, "endsAt must be after startsAt"],
      [{ startsAt: inTenMinutes, endsAt: inTenMinutes.replace("Z", "+00:00") }, "endsAt must be after startsAt"],
      [{ startsAt: undefined }, "startsAt is required"],
      [{ endsAt: undefined }, "endsAt is required"],
      [{ startsAt: "2020-01-01T00:00:00Z", endsAt: "2020-01-02T00:00:00Z" }, "endsAt is in the past"],
      [{ reason: "" }, "reason is required"],
      [{ reason: "   " }, "reason is required"],
      [{ reason: "r".repeat(1001) }, "reason must be at most 1000 characters"],
      [{ match: { sources: ["Pager Thing"] } }, "match.sources"],
      [{ match: { entities: [{ kind: "service" }] } }, "match.entities: every entity needs a kind and an id"],
      [{ match: { entities: Array.from({ length: 101 }, (_, i) => ({ kind: "service", id: `s${i}` })) } }, "at most 100 entities"],
      [{ match: { entities: [{ kind: "service", id: "x".repeat(201) }] } }, "at most 200 characters"],
      // The gateway decodes timestamps before the handler runs; its message does not name the field.
      [{ startsAt: "tomorrow" }, "invalid RFC 3339 string"],
    ];
    for (const [body, message] of cases) {
      const res = await createWindow(body);
      expect(res.status, JSON.stringify(body).slice(0, 120)).toBe(400);
      expect(res.body.error).toContain(message);
    }
    const list = await app.call("GET", PATH, { token: memberToken });
    expect(list.body.maintenanceWindows).toEqual([]);
  });
});

describe("GET and DELETE /o/{org}/maintenance-windows", () => {
  it("lists the organization's windows to any member, newest start first", async () => {
    const early = await createWindow({ startsAt: minutesFromNow(30), endsAt: minutesFromNow(90), reason: "first" });
    const late = await createWindow({ startsAt: minutesFromNow(120), endsAt: minutesFromNow(180), reason: "second" });
    const res = await app.call("GET", PATH, { token: memberToken });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ maintenanceWindows: [late.body, early.body] });
    expect((await app.call("GET", `/o/${OTHER.org}/maintenance-windows`, { token: otherOrgToken })).body).toEqual({ maintenanceWindows: [] });
    expect((await app.call("GET", PATH)).status).toBe(401);
    expect((await app.call("GET", PATH, { token: otherOrgToken })).status).toBe(403);
  });

  it("deletes for an admin with 204; members may not; unknown and other organizations' ids are 404", async () => {
    const window = await createWindow({});
    const id = window.body.id as string;
    expect((await app.call("DELETE", `${PATH}/${id}`, { token: memberToken })).status).toBe(403);
    expect((await app.call("DELETE", `${PATH}/${id}`)).status).toBe(401);
    expect((await app.call("DELETE", `/o/${OTHER.org}/maintenance-windows/${id}`, { token: otherOrgToken })).status).toBe(404);
    const deleted = await app.call("DELETE", `${PATH}/${id}`, { token: adminToken });
    expect(deleted.status).toBe(204);
    expect(deleted.body).toBeNull();
    const again = await app.call("DELETE", `${PATH}/${id}`, { token: adminToken });
    expect(again.status).toBe(404);
    expect(again.body).toEqual({ error: "no such maintenance window" });
    expect((await app.call("DELETE", `${PATH}/not-a-uuid`, { token: adminToken })).status).toBe(404);
    expect((await app.call("GET", PATH, { token: memberToken })).body.maintenanceWindows).toEqual([]);
  });
  it("ends an active window now: it stays listed under past, and what it covered opens again", async () => {
    const window = await createWindow({ reason: "ended early" });
    const id = window.body.id as string;
    const current = await app.call("GET", `${PATH}?state=current`, { token: memberToken });
    expect(current.status).toBe(200);
    expect(current.body.maintenanceWindows.map((w: { id: string }) => w.id)).toContain(id);
    expect((await deliver()).outcome).toBe("suppressed");

    expect((await app.call("POST", `${PATH}/${id}/end`, { token: memberToken })).status).toBe(403);
    expect((await app.call("POST", `${PATH}/${id}/end`)).status).toBe(401);
    expect((await app.call("POST", `/o/${OTHER.org}/maintenance-windows/${id}/end`, { token: otherOrgToken })).status).toBe(404);
    const ended = await app.call("POST", `${PATH}/${id}/end`, { token: adminToken });
    expect(ended.status).toBe(200);
    expect(ended.body).toMatchObject({ id, reason: "ended early", startsAt: window.body.startsAt });
    expect(Date.parse(ended.body.endsAt)).toBeLessThan(Date.parse(window.body.endsAt));
    expect(Date.parse(ended.body.endsAt)).toBeGreaterThanOrEqual(Date.parse(window.body.startsAt));

    expect((await deliver()).outcome).toBe("opened");
    const past = await app.call("GET", `${PATH}?state=past`, { token: memberToken });
    expect(past.body.maintenanceWindows).toEqual([ended.body]);
    const stillCurrent = await app.call("GET", `${PATH}?state=current`, { token: memberToken });
    expect(stillCurrent.body.maintenanceWindows.map((w: { id: string }) => w.id)).not.toContain(id);
    // Without a state the list is the design's: every window, past ones included.
    expect((await app.call("GET", PATH, { token: memberToken })).body.maintenanceWindows).toEqual([ended.body]);

    const again = await app.call("POST", `${PATH}/${id}/end`, { token: adminToken });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: "the maintenance window has already ended" });
    const audit = await app.call("GET", `/o/${OWNER.org}/audit-events?kind=maintenance_window.ended`, { token: ownerToken });
    expect(audit.body.events.map((e: { data: { maintenanceWindowId: string } }) => e.data.maintenanceWindowId)).toContain(id);
  });

  it("refuses to end a window that has not started, saying to cancel it instead", async () => {
    const window = await createWindow({ startsAt: minutesFromNow(30), endsAt: minutesFromNow(90) });
    const res = await app.call("POST", `${PATH}/${window.body.id}/end`, { token: adminToken });
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ error: "the maintenance window has not started; delete it to cancel it" });
  });

  it("refuses an unknown state with 400 naming the accepted values", async () => {
    const res = await app.call("GET", `${PATH}?state=later`, { token: memberToken });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "state must be current, past, or empty for every window" });
  });
});

describe("suppression", () => {
  it("suppresses every delivery during an active window covering all: nothing opens or is recorded", async () => {
    const openIdentity = `metrics-monitor:mw:open:${++sequence}`;
    const open = await deliver({ attachIdentity: openIdentity });
    expect(open.outcome).toBe("opened");
    const window = await createWindow({});
    const before = await openIncidentCount();
    const alertRes = await deliver();
    expect(alertRes).toMatchObject({ outcome: "suppressed", maintenanceWindowId: window.body.id, reason: "an active maintenance window covers this delivery" });
    expect(alertRes.incident).toBeUndefined();
    // Also what would have attached to or recorded on the open incident.
    expect((await deliver({ attachIdentity: openIdentity, eventId: "repeat-during-window" })).outcome).toBe("suppressed");
    expect((await deliver({ attachIdentity: openIdentity, eventId: "recovery-during-window", kind: "recovery" })).outcome).toBe("suppressed");
    expect(await openIncidentCount()).toBe(before);
    const timeline = (await app.call("GET", `/o/${OWNER.org}/incidents/${open.incident!.id}`, { token: memberToken })).body.timeline;
    expect(timeline.map((e: { kind: string }) => e.kind)).toEqual(["opened"]);
  });

  it("keeps a suppressed delivery visible in the audit log with the window, source and title", async () => {
    const window = await createWindow({ reason: "audit check" });
    const res = await deliver({ title: "Suppressed but seen", source: "cloud-monitor" });
    expect(res.outcome).toBe("suppressed");
    const deadline = Date.now() + 60_000; // a hang bound, many times what it takes
    let found: { kind: string; actor: string; data: Record<string, unknown> } | undefined;
    while (!found && Date.now() < deadline) {
      const audit = await app.call("GET", `/o/${OWNER.org}/audit-events`, { token: ownerToken });
      found = audit.body.events.find(
        (e: { kind: string; data: { title?: string } }) => e.kind === "trigger.suppressed" && e.data.title === "Suppressed but seen",
      );
      if (!found) await new Promise((r) => setTimeout(r, 50));
    }
    expect(found).toMatchObject({
      kind: "trigger.suppressed",
      actor: "trigger:cloud-monitor",
      data: { maintenanceWindowId: window.body.id, source: "cloud-monitor", title: "Suppressed but seen", kind: "alert" },
    });
    const audit = await app.call("GET", `/o/${OWNER.org}/audit-events`, { token: ownerToken });
    expect(audit.body.events.map((e: { kind: string }) => e.kind)).toContain("maintenance_window.created");
  });

  it("matches by source: other sources still open incidents", async () => {
    await createWindow({ match: { sources: ["cloud-monitor"] } });
    expect((await deliver({ source: "cloud-monitor" })).outcome).toBe("suppressed");
    expect((await deliver({ source: "metrics-monitor" })).outcome).toBe("opened");
  });

  it("matches by entity exactly: another entity, or none, still opens", async () => {
    await createWindow({
      match: {
        entities: [
          { kind: "service", id: "checkout" },
          { kind: "host", id: "db-1" },
        ],
      },
    });
    expect((await deliver({ entity: { kind: "service", id: "checkout" } })).outcome).toBe("suppressed");
    expect((await deliver({ entity: { kind: "host", id: "db-1" } })).outcome).toBe("suppressed");
    expect((await deliver({ entity: { kind: "service", id: "payments" } })).outcome).toBe("opened");
    expect((await deliver({ entity: { kind: "host", id: "checkout" } })).outcome).toBe("opened");
    expect((await deliver({})).outcome).toBe("opened");
  });

  it("needs both the source and the entity when a window names both", async () => {
    await createWindow({ match: { sources: ["alert-router"], entities: [{ kind: "service", id: "checkout" }] } });
    expect((await deliver({ source: "alert-router", entity: { kind: "service", id: "checkout" } })).outcome).toBe("suppressed");
    expect((await deliver({ source: "metrics-monitor", entity: { kind: "service", id: "checkout" } })).outcome).toBe("opened");
    expect((await deliver({ source: "alert-router", entity: { kind: "service", id: "other" } })).outcome).toBe("opened");
  });

  it("does not suppress before a window starts, nor after it is deleted", async () => {
    await createWindow({ startsAt: minutesFromNow(30), endsAt: minutesFromNow(60) });
    expect((await deliver()).outcome).toBe("opened");
    const active = await createWindow({});
    expect((await deliver()).outcome).toBe("suppressed");
    expect((await app.call("DELETE", `${PATH}/${active.body.id}`, { token: adminToken })).status).toBe(204);
    created.splice(created.indexOf(active.body.id), 1);
    expect((await deliver()).outcome).toBe("opened");
  });

  it("does not suppress another organization's deliveries", async () => {
    await createWindow({});
    const otherOrg = await createClient(IdentityService, app.process.transport).getOrganization({ slug: OTHER.org });
    const res = await client.record({
      orgId: otherOrg.id,
      orgSlug: OTHER.org,
      alert: create(AlertSchema, { source: "metrics-monitor", kind: "alert", attachIdentity: "metrics-monitor:mw:other", title: "Theirs", severity: "sev3" }),
    });
    expect(res.outcome).toBe("opened");
  });
});
