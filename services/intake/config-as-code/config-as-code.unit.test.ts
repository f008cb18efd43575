import { Code, type Client, type ConnectError, createClient } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { IntakeService } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { codeOf, serveUnderTest, STUB_TOKEN, stubPeers, stubPrincipal } from "../../../test/support/stub-peers.js";
import { type Broadcast, CORRELATION_CHANGED, CUSTOM_SOURCE_CHANGED, GROUPING_OVERRIDES_CHANGED } from "../../runtime/transport/broadcast.js";
import { MAX_DESCRIPTION_CHARACTERS } from "../custom-sources/custom-source-records.js";
import { SOURCES_PER_ORG } from "../custom-sources/store.js";
import { createMemoryCustomSourceStore } from "../custom-sources/testing/memory-store.js";
import { createMemoryTables, type MemoryTables } from "../testing/memory-tables.js";
import { createConfigAsCodeHandlers } from "./config-as-code.js";
import { createMemoryConfigStore } from "./testing/memory-store.js";

/**
 * Configuration as code at the handler level, over the memory stores and stub peers: the plan a
 * file makes against what the organization has, applying it (all of intake's part or none), and
 * applying it again changing nothing. The Postgres store is held to the same contract by
 * intake/testing/store-contract.ts; heartbeats and windows are their services' (stubbed here).
 */

const principal = stubPrincipal();
const ORG = principal.orgSlug;
const auth = { headers: { authorization: `Bearer ${STUB_TOKEN}` } };

interface Harness {
  tables: MemoryTables;
  client: Client<typeof IntakeService>;
  /** The custom sources whose change was broadcast. */
  published: string[];
  /** The organizations whose overrides' change was broadcast. */
  overridesChanged: string[];
  /** The organizations whose correlation settings' change was broadcast. */
  correlationChanged: string[];
}

function harness(role = "owner"): Harness {
  const tables = createMemoryTables();
  const peers = stubPeers({
    principal: stubPrincipal({ role }),
    heartbeats: { listHeartbeats: () => ({ heartbeats: [], nextCursor: "" }) },
    incidents: { listMaintenanceWindows: () => ({ maintenanceWindows: [] }), getEscalationPolicy: () => ({ severities: [] }) },
  });
  const h: Harness = { tables, client: undefined!, published: [], overridesChanged: [], correlationChanged: [] };
  const broadcast: Broadcast = {
    publish: async (subject, data) => {
      if (subject === CUSTOM_SOURCE_CHANGED) h.published.push(data);
      else if (subject === GROUPING_OVERRIDES_CHANGED) h.overridesChanged.push(data);
      else if (subject === CORRELATION_CHANGED) h.correlationChanged.push(data);
      else throw new Error(`no notice expected on ${subject}`);
    },
    subscribe() {},
    available: () => true,
    onStateChange() {},
  };
  const handlers = createConfigAsCodeHandlers({
    clients: peers.clients,
    config: { store: createMemoryConfigStore(tables), outbox: { poke() {} }, publicUrl: "https://warroom.example", broadcast },
  });
  h.client = createClient(
    IntakeService,
    serveUnderTest((router) => router.service(IntakeService, handlers)),
  );
  return h;
}

const FILE = `
version: 1
customSources:
  - name: billing
    rules:
      - title: "'Payment failed: ' + body.id"
        attachKey: body.id
  - name: deploys
    preset: ""
    rules:
      - title: "'Deploy ' + body.sha"
groupingOverrides:
  - source: metrics-monitor
    attachKey: body.service
    windowHours: 4
correlation:
  mode: link
  windowMinutes: 15
`;

const plan = (changes: { action: string; kind: string; name: string }[]) => changes.map((c) => `${c.action} ${c.kind} ${c.name}`);

describe("configuration as code, at the handler level", () => {
  let h: Harness;
  beforeEach(() => {
    h = harness();
  });

  it("plans a file without changing anything on a dry run", async () => {
    const dry = await h.client.applyConfig({ org: ORG, yaml: FILE, dryRun: true }, auth);
    expect(plan(dry.changes)).toEqual([
      "create customSource billing",
      "create customSource deploys",
      "create groupingOverride metrics-monitor",
      "create correlation correlation",
    ]);
    expect(dry.applied).toBe(false);
    expect(dry.credentials).toEqual([]);
    expect(h.tables.sources).toEqual([]);
    expect(h.tables.overrides).toEqual([]);
    expect(h.tables.audits).toEqual([]);
  });

  it("applies a file once: the created sources' credentials are shown once, and applying it again changes nothing", async () => {
    const applied = await h.client.applyConfig({ org: ORG, yaml: FILE }, auth);
    expect(applied.applied).toBe(true);
    expect(applied.credentials.map((c) => c.name)).toEqual(["billing", "deploys"]);
    expect(h.tables.sources.map((row) => row.name).sort()).toEqual(["billing", "deploys"]);
    expect(h.tables.correlation.get(principal.orgId)).toEqual({ mode: "link", windowMinutes: 15, key: "" });
    expect(h.tables.audits.every((a) => a.data.via === "config")).toBe(true);
    expect(h.correlationChanged).toEqual([principal.orgId]);
    const again = await h.client.applyConfig({ org: ORG, yaml: FILE }, auth);
    expect(again.changes).toEqual([]);
    expect(again.credentials).toEqual([]);
    expect(h.tables.audits).toHaveLength(4);
  });

  it("updates and deletes what the file changes, broadcasting each changed source; a section left out is left as it is", async () => {
    await h.client.applyConfig({ org: ORG, yaml: FILE }, auth);
    // The file set an override: every replica heard that the organization's overrides changed.
    expect(h.overridesChanged).toHaveLength(1);
    const billing = h.tables.sources.find((row) => row.name === "billing")!;
    const deploys = h.tables.sources.find((row) => row.name === "deploys")!;
    const changed = `
version: 1
customSources:
  - name: billing
    rules:
      - title: "'Payment failed'"
`;
    const result = await h.client.applyConfig({ org: ORG, yaml: changed }, auth);
    expect(plan(result.changes)).toEqual(["update customSource billing", "delete customSource deploys"]);
    expect(h.published).toEqual([billing.id, deploys.id]);
    expect(h.tables.sources.map((row) => [row.name, row.version])).toEqual([["billing", 2]]);
    // No groupingOverrides and no correlation section: both kept, and no override notice.
    expect(h.tables.overrides).toHaveLength(1);
    expect(h.overridesChanged).toHaveLength(1);
    expect(h.tables.correlation.size).toBe(1);
  });

  it("exports what it applied, and the export applied again changes nothing", async () => {
    await h.client.applyConfig({ org: ORG, yaml: FILE }, auth);
    const exported = await h.client.exportConfig({ org: ORG }, auth);
    const file = parseYaml(exported.yaml);
    expect(file.customSources.map((s: { name: string }) => s.name)).toEqual(["billing", "deploys"]);
    expect(file.groupingOverrides).toEqual([{ source: "metrics-monitor", attachKey: "body.service", windowHours: 4 }]);
    expect(exported.yaml).not.toMatch(/secret/i);
    expect((await h.client.applyConfig({ org: ORG, yaml: exported.yaml, dryRun: true }, auth)).changes).toEqual([]);
  });

  it("carries a source's description: created, exported when set, a change of it an update, and an unchanged file applied again changes nothing", async () => {
    const described = (text: string) => FILE.replace("  - name: billing\n", `  - name: billing\n    description: ${JSON.stringify(text)}\n`);
    const note = "Payments' checker.\nPages the billing on-call.";
    expect(plan((await h.client.applyConfig({ org: ORG, yaml: described(note) }, auth)).changes)).toContain("create customSource billing");
    const billing = () => h.tables.sources.find((row) => row.name === "billing")!;
    expect(billing().description).toBe(note);
    expect((await h.client.applyConfig({ org: ORG, yaml: described(note) }, auth)).changes).toEqual([]);

    const exported = await h.client.exportConfig({ org: ORG }, auth);
    const sources = parseYaml(exported.yaml).customSources as Record<string, unknown>[];
    expect(sources.map((s) => [s.name, s.description])).toEqual([
      ["billing", note],
      ["deploys", undefined],
    ]);
    // A source without one is written without the key.
    expect(Object.keys(sources[1]!)).not.toContain("description");
    expect((await h.client.applyConfig({ org: ORG, yaml: exported.yaml, dryRun: true }, auth)).changes).toEqual([]);

    const changed = await h.client.applyConfig({ org: ORG, yaml: described("Checks payments.") }, auth);
    expect(plan(changed.changes)).toEqual(["update customSource billing"]);
    expect([billing().description, billing().version]).toEqual(["Checks payments.", 2]);
    expect(h.published).toEqual([billing().id]);
    // The file is the whole source: one without a description clears it.
    expect(plan((await h.client.applyConfig({ org: ORG, yaml: FILE }, auth)).changes)).toEqual(["update customSource billing"]);
    expect(billing().description).toBe("");
  });

  it("refuses a description past its bound, naming the source", async () => {
    const long = FILE.replace("  - name: billing\n", `  - name: billing\n    description: ${"x".repeat(MAX_DESCRIPTION_CHARACTERS + 1)}\n`);
    const refused = (await h.client.applyConfig({ org: ORG, yaml: long }, auth).catch((err: Error) => err)) as ConnectError;
    expect(refused.code).toBe(Code.InvalidArgument);
    expect(refused.rawMessage).toBe(
      `customSources[0] (billing): description: at most ${MAX_DESCRIPTION_CHARACTERS} characters (got ${MAX_DESCRIPTION_CHARACTERS + 1})`,
    );
    expect(h.tables.sources).toEqual([]);
  });

  it("refuses a bad file before anything changes", async () => {
    const refused = async (yaml: string) => codeOf(h.client.applyConfig({ org: ORG, yaml }, auth));
    expect(await refused("version: 2")).toBe(Code.InvalidArgument);
    expect(await refused("version: 1\nunknown: true")).toBe(Code.InvalidArgument);
    const twice = "version: 1\ncustomSources:\n  - {name: a, rules: [{title: \"'t'\"}]}\n  - {name: a, rules: [{title: \"'t'\"}]}";
    expect((await h.client.applyConfig({ org: ORG, yaml: twice }, auth).catch((err: Error) => err)) as Error).toHaveProperty(
      "message",
      expect.stringContaining("appears twice"),
    );
    expect(await refused("version: 1\ncustomSources:\n  - name: a\n    rules: [{title: 'body.('}]")).toBe(Code.InvalidArgument);
    expect(await refused("version: 1\ngroupingOverrides:\n  - {source: Not A Source}")).toBe(Code.InvalidArgument);
    const many = Array.from({ length: SOURCES_PER_ORG + 1 }, (_, i) => `  - {name: s-${i}, rules: [{title: "'t'"}]}`).join("\n");
    expect(await refused(`version: 1\ncustomSources:\n${many}`)).toBe(Code.FailedPrecondition);
    expect(await codeOf(harness("member").client.applyConfig({ org: ORG, yaml: FILE }, auth))).toBe(Code.PermissionDenied);
    expect(h.tables.sources).toEqual([]);
    expect(h.tables.audits).toEqual([]);
  });

  it("applies none of intake's part when one write is refused: a signature for a source kept only as a hash", async () => {
    await h.client.applyConfig({ org: ORG, yaml: FILE }, auth);
    const audits = h.tables.audits.length;
    const signed = `
version: 1
customSources:
  - name: billing
    auth:
      signature: {header: x-signature}
    rules:
      - title: "'Payment failed'"
groupingOverrides: []
`;
    expect(await codeOf(h.client.applyConfig({ org: ORG, yaml: signed }, auth))).toBe(Code.FailedPrecondition);
    expect(h.tables.overrides).toHaveLength(1);
    expect(h.tables.sources.map((row) => row.name).sort()).toEqual(["billing", "deploys"]);
    expect(h.tables.audits).toHaveLength(audits);
    expect(h.published).toEqual([]);
    expect(h.overridesChanged).toHaveLength(1);
  });

  it("plans against the caller's organization alone", async () => {
    await createMemoryCustomSourceStore(h.tables).create(
      {
        id: "00000000-0000-4000-8000-0000000000aa",
        orgId: "00000000-0000-4000-8000-0000000000ff",
        orgSlug: "globex",
        name: "billing",
        rules: [],
        auth: { secretInPath: false, basicAuth: false, secretHeader: "", signature: null },
        preset: "",
        credential: { hash: Buffer.alloc(32, 9), sealed: null, sealedBy: null },
      },
      SOURCES_PER_ORG,
      { orgId: "00000000-0000-4000-8000-0000000000ff", kind: "custom_source.created", actor: "x", data: {} },
    );
    const dry = await h.client.applyConfig({ org: ORG, yaml: "version: 1\ncustomSources: []", dryRun: true }, auth);
    expect(dry.changes).toEqual([]);
    const applied = await h.client.applyConfig({ org: ORG, yaml: FILE }, auth);
    expect(applied.credentials.map((c) => c.name)).toEqual(["billing", "deploys"]);
    expect(h.tables.sources.filter((row) => row.name === "billing")).toHaveLength(2);
  });
});
