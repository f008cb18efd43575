import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { OrganizationSchema } from "../../../gen/warroom/identity/v1/identity_pb.js";
import type { FindLatestOpenRequest } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { IntakeService } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { codeOf, serveUnderTest, STUB_TOKEN, type StubPeers, stubPeers, stubPrincipal } from "../../../test/support/stub-peers.js";
import { createLogger } from "../../runtime/observability/logger.js";
import { createInProcessBroadcast } from "../../runtime/transport/broadcast.js";
import type { AlertInit } from "../sources/index.js";
import { createMemoryTables, type MemoryTables } from "../testing/memory-tables.js";
import { createGrouping, createGroupingHandlers, type Grouping } from "./grouping.js";
import { createMemoryGroupingStore } from "./testing/memory-store.js";

/**
 * Grouping overrides at the handler level and as a delivery meets them, over the memory store and
 * a stub incident core: which attach identity an override resolves, and when a window moves a
 * generation on. The Postgres store is held to the same contract by intake/testing/store-contract.ts.
 */

const principal = stubPrincipal();
const ORG = principal.orgSlug;
const org = create(OrganizationSchema, { id: principal.orgId, slug: principal.orgSlug });
const auth = { headers: { authorization: `Bearer ${STUB_TOKEN}` } };
const HOUR_MS = 3_600_000;

interface Harness {
  tables: MemoryTables;
  peers: StubPeers;
  client: Client<typeof IntakeService>;
  grouping: Grouping;
  /** The attach identities the incident core was asked about. */
  asked: string[];
  /** When the open incident of each identity was opened; none: nothing open. */
  open: Map<string, Date>;
}

function harness(role = "owner"): Harness {
  const tables = createMemoryTables();
  const store = createMemoryGroupingStore(tables);
  const peers = stubPeers({ principal: stubPrincipal({ role }) });
  const h: Harness = { tables, peers, client: undefined!, grouping: undefined!, asked: [], open: new Map() };
  peers.incidents.findLatestOpen = (req: FindLatestOpenRequest) => {
    const identity = req.attachIdentity ?? "";
    h.asked.push(identity);
    const openedAt = h.open.get(identity);
    return openedAt ? { incidentId: `incident:${req.attachIdentity}`, attachIdentity: req.attachIdentity, openedAt: timestampFromDate(openedAt) } : {};
  };
  const broadcast = createInProcessBroadcast();
  h.grouping = createGrouping({ store, clients: peers.clients, logger: createLogger("silent", "grouping-unit"), broadcast });
  const handlers = createGroupingHandlers({ store, outbox: { poke() {} }, clients: peers.clients, broadcast });
  h.client = createClient(
    IntakeService,
    serveUnderTest((router) => router.service(IntakeService, handlers)),
  );
  return h;
}

function alert(kind = "alert"): AlertInit {
  return { source: "metrics-monitor", kind, title: "CPU high", attachIdentity: "mm:cpu:web-1" };
}

describe("grouping overrides, at the handler level", () => {
  let h: Harness;
  beforeEach(() => {
    h = harness();
  });

  it("sets, lists by source and deletes an organization's overrides, each change audited", async () => {
    await h.client.putGroupingOverride({ org: ORG, source: "metrics-monitor", attachKey: "body.labels.service", windowHours: 0 }, auth);
    await h.client.putGroupingOverride({ org: ORG, source: "alert-router", windowHours: 12 }, auth);
    await h.client.putGroupingOverride({ org: ORG, source: "metrics-monitor", attachKey: "body.host", windowHours: 2 }, auth);
    const listed = await h.client.listGroupingOverrides({ org: ORG }, auth);
    expect(listed.overrides.map((o) => [o.source, o.attachKey, o.windowHours])).toEqual([
      ["alert-router", "", 12],
      ["metrics-monitor", "body.host", 2],
    ]);
    await h.client.deleteGroupingOverride({ org: ORG, source: "alert-router" }, auth);
    expect(await codeOf(h.client.deleteGroupingOverride({ org: ORG, source: "alert-router" }, auth))).toBe(Code.NotFound);
    expect(h.tables.audits.map((a) => a.kind)).toEqual([
      "grouping_override.set",
      "grouping_override.set",
      "grouping_override.set",
      "grouping_override.deleted",
    ]);
    expect(h.tables.overrides.find((o) => o.source === "metrics-monitor")?.version).toBe(2);
  });

  it("refuses what is not a source, a key that does not compile, a window past a year, an empty override, and a member", async () => {
    const put = (source: string, attachKey: string, windowHours: number) =>
      codeOf(h.client.putGroupingOverride({ org: ORG, source, attachKey, windowHours }, auth));
    expect(await put("Not A Source", "body.x", 0)).toBe(Code.InvalidArgument);
    expect(await put("metrics-monitor", "body.(", 0)).toBe(Code.InvalidArgument);
    expect(await put("metrics-monitor", "", 24 * 366 + 1)).toBe(Code.InvalidArgument);
    expect(await put("metrics-monitor", "", 0)).toBe(Code.InvalidArgument);
    const member = harness("member");
    expect(await codeOf(member.client.putGroupingOverride({ org: ORG, source: "metrics-monitor", windowHours: 1 }, auth))).toBe(Code.PermissionDenied);
    expect(h.tables.overrides).toEqual([]);
    expect(h.tables.audits).toEqual([]);
  });

  it("never lists nor deletes another organization's override", async () => {
    h.tables.overrides.push({ orgId: "00000000-0000-4000-8000-0000000000ff", source: "zabbix", attach_key: "body.host", window_hours: 0, version: 1 });
    expect((await h.client.listGroupingOverrides({ org: ORG }, auth)).overrides).toEqual([]);
    expect(await codeOf(h.client.deleteGroupingOverride({ org: ORG, source: "zabbix" }, auth))).toBe(Code.NotFound);
    expect(h.tables.overrides).toHaveLength(1);
  });
});

describe("grouping overrides, as a delivery meets them", () => {
  let h: Harness;
  beforeEach(() => {
    h = harness();
  });

  it("leaves a delivery untouched without an override for its source", async () => {
    await h.client.putGroupingOverride({ org: ORG, source: "alert-router", attachKey: "body.x", windowHours: 1 }, auth);
    const a = alert();
    await h.grouping.apply(org, a, { host: "web-1" });
    expect(a.attachIdentity).toBe("mm:cpu:web-1");
    expect(h.asked).toEqual([]);
  });

  it("groups by the override's key, per source; a key that fails keeps the source's own", async () => {
    await h.client.putGroupingOverride({ org: ORG, source: "metrics-monitor", attachKey: "body.service" }, auth);
    const a = alert();
    await h.grouping.apply(org, a, { service: "checkout" });
    expect(a.attachIdentity).toBe("override:metrics-monitor:checkout");
    const failing = alert();
    await h.grouping.apply(org, failing, { other: 1 });
    expect(failing.attachIdentity).toBe("mm:cpu:web-1");
    const long = alert();
    await h.grouping.apply(org, long, { service: "x".repeat(500) });
    expect(long.attachIdentity).toMatch(/^override:metrics-monitor:sha256:/);
  });

  it("applies an override deleted and set again with another key at once, though the new row starts at the same version", async () => {
    await h.client.putGroupingOverride({ org: ORG, source: "metrics-monitor", attachKey: "body.service" }, auth);
    await h.grouping.apply(org, alert(), { service: "checkout" });
    await h.client.deleteGroupingOverride({ org: ORG, source: "metrics-monitor" }, auth);
    const plain = alert();
    await h.grouping.apply(org, plain, { service: "checkout" });
    expect(plain.attachIdentity).toBe("mm:cpu:web-1");
    await h.client.putGroupingOverride({ org: ORG, source: "metrics-monitor", attachKey: "body.team" }, auth);
    const a = alert();
    await h.grouping.apply(org, a, { service: "checkout", team: "payments" });
    expect(a.attachIdentity).toBe("override:metrics-monitor:payments");
  });

  it("moves to a new generation once the open incident is older than the window; a preview only names it", async () => {
    await h.client.putGroupingOverride({ org: ORG, source: "metrics-monitor", windowHours: 2 }, auth);
    // Open for an hour: within the window, the delivery attaches to the first generation.
    h.open.set("mm:cpu:web-1", new Date(Date.now() - HOUR_MS));
    const within = alert();
    await h.grouping.apply(org, within, {});
    expect(within.attachIdentity).toBe("mm:cpu:web-1");
    // Open for three hours: past it.
    h.open.set("mm:cpu:web-1", new Date(Date.now() - 3 * HOUR_MS));
    const preview = alert();
    await h.grouping.apply(org, preview, {}, { dryRun: true });
    expect(preview.attachIdentity).toBe("mm:cpu:web-1#g1");
    expect(h.tables.generations.size).toBe(0);
    const past = alert();
    await h.grouping.apply(org, past, {});
    expect(past.attachIdentity).toBe("mm:cpu:web-1#g1");
    expect([...h.tables.generations.values()].map((g) => g.generation)).toEqual([1]);
    // The next one finds nothing open under #g1 and stays there; a recovery follows the current generation unasked.
    const next = alert();
    await h.grouping.apply(org, next, {});
    expect(next.attachIdentity).toBe("mm:cpu:web-1#g1");
    const asked = h.asked.length;
    const recovery = alert("resolve");
    await h.grouping.apply(org, recovery, {});
    expect(recovery.attachIdentity).toBe("mm:cpu:web-1#g1");
    expect(h.asked).toHaveLength(asked);
  });
});
