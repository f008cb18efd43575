import { parseTriggerBody } from "../request-body.js";
import { randomUUID } from "node:crypto";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { IntakeService } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { codeOf, serveUnderTest, STUB_TOKEN, stubPeers, stubPrincipal } from "../../../test/support/stub-peers.js";
import { createLogger } from "../../runtime/observability/logger.js";
import { type Broadcast, CUSTOM_SOURCE_CHANGED } from "../../runtime/transport/broadcast.js";
import type { DeliveryPath } from "../delivery.js";
import type { MappedDelivery } from "../sources/index.js";
import { createMemoryTables, type MemoryTables } from "../testing/memory-tables.js";
import { createRecordWriter } from "./custom-source-delivery.js";
import { AUDIT_KINDS, createCustomSourceHandlers } from "./custom-source-handlers.js";
import { SOURCES_PER_ORG } from "./store.js";
import { createMemoryCustomSourceStore } from "./testing/memory-store.js";

/**
 * The custom-source routes and deliveries at the handler level, over the memory store and stub
 * peers: validation, the organization's limit and isolation, audit records and the broadcast of
 * a change, the credential's life, and what a delivery keeps. The Postgres store is held to the
 * same contract by intake/testing/store-contract.ts.
 */

const ORG = stubPrincipal().orgSlug;
const auth = { headers: { authorization: `Bearer ${STUB_TOKEN}` } };
const logger = createLogger("silent", "custom-sources-unit");
const RULES = [{ title: "'Disk full on ' + body.host", attachKey: "body.host", eventId: "body.id" }];

interface Harness {
  tables: MemoryTables;
  client: Client<typeof IntakeService>;
  published: string[];
  mapped: MappedDelivery[];
  failures: number;
  pokes: number;
}

/** A broadcast within the process: what a change published, and the subscribers it reaches. */
function localBroadcast(published: string[]): Broadcast {
  const handlers = new Map<string, ((data: string) => void)[]>();
  return {
    async publish(subject, data) {
      if (subject === CUSTOM_SOURCE_CHANGED) published.push(data);
      for (const handler of handlers.get(subject) ?? []) handler(data);
    },
    subscribe(subject, handler) {
      handlers.set(subject, [...(handlers.get(subject) ?? []), handler]);
    },
    available: () => true,
    onStateChange() {},
  };
}

function harness(role = "owner"): Harness {
  const tables = createMemoryTables();
  const store = createMemoryCustomSourceStore(tables);
  const peers = stubPeers({ principal: stubPrincipal({ role }) });
  const h: Harness = { tables, client: undefined!, published: [], mapped: [], failures: 0, pokes: 0 };
  // The shared delivery path's part is the incident core's: here it maps, keeps what it was given and opens.
  const delivery: DeliveryPath = {
    // No budget of large bodies here: every body is admitted and read on the loop.
    async admitBody() {},
    async readJson(_orgId, _route, req) {
      return parseTriggerBody(req.body, req.contentType, { allowForm: false });
    },
    async deliver(_org, _route, _source, _body, mapping) {
      const mapped = typeof mapping === "function" ? await mapping() : mapping;
      h.mapped.push(mapped);
      return { outcome: mapped.outcome === "ignored" ? "ignored" : "opened", incidentId: "00000000-0000-4000-8000-00000000000a" };
    },
  };
  const handlers = createCustomSourceHandlers({
    clients: peers.clients,
    delivery,
    failures: {
      async add() {
        h.failures++;
        return { failures: h.failures, retry_after: 60 };
      },
    },
    customSources: {
      store,
      outbox: { poke: () => void h.pokes++ },
      publicUrl: "https://warroom.example",
      broadcast: localBroadcast(h.published),
      records: createRecordWriter(store, logger),
      logger,
    },
  });
  h.client = createClient(
    IntakeService,
    serveUnderTest((router) => router.service(IntakeService, handlers)),
  );
  return h;
}

describe("custom sources, at the handler level", () => {
  let h: Harness;
  beforeEach(() => {
    h = harness();
  });

  it("creates a source with its credential, audited and not broadcast (no replica holds it yet)", async () => {
    const created = await h.client.createCustomSource({ org: ORG, name: "disk-alerts", rules: RULES }, auth);
    expect(created.source?.name).toBe("disk-alerts");
    expect(created.credential?.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(created.credential?.url).toBe(`https://warroom.example/triggers/custom/${created.source?.id}`);
    expect(h.tables.audits.map((a) => [a.kind, a.data.name])).toEqual([[AUDIT_KINDS.created, "disk-alerts"]]);
    expect(h.pokes).toBe(1);
    expect(h.published).toEqual([]);
    // Kept as a hash only: the secret itself is nowhere in the row.
    expect(h.tables.sources[0]!.secret_hash?.toString("hex")).not.toContain(created.credential!.secret);
  });

  it("refuses a bad name, an unknown preset, rules that do not compile, and a member", async () => {
    expect(await codeOf(h.client.createCustomSource({ org: ORG, name: "Not A Badge", rules: RULES }, auth))).toBe(Code.InvalidArgument);
    expect(await codeOf(h.client.createCustomSource({ org: ORG, name: "alert-router", rules: RULES }, auth))).toBe(Code.InvalidArgument);
    expect(await codeOf(h.client.createCustomSource({ org: ORG, name: "p", preset: "no-such-preset" }, auth))).toBe(Code.InvalidArgument);
    expect(await codeOf(h.client.createCustomSource({ org: ORG, name: "bad", rules: [{ title: "body.(" }] }, auth))).toBe(Code.InvalidArgument);
    const member = harness("member");
    expect(await codeOf(member.client.createCustomSource({ org: ORG, name: "by-member", rules: RULES }, auth))).toBe(Code.PermissionDenied);
    expect(h.tables.sources).toEqual([]);
    expect(h.tables.audits).toEqual([]);
  });

  it("refuses a second source of one name, and the organization's source past its limit", async () => {
    await h.client.createCustomSource({ org: ORG, name: "once", rules: RULES }, auth);
    expect(await codeOf(h.client.createCustomSource({ org: ORG, name: "once", rules: RULES }, auth))).toBe(Code.AlreadyExists);
    for (let i = 1; i < SOURCES_PER_ORG; i++) await h.client.createCustomSource({ org: ORG, name: `s-${i}`, rules: RULES }, auth);
    const past = h.client.createCustomSource({ org: ORG, name: "one-too-many", rules: RULES }, auth);
    expect(await codeOf(past)).toBe(Code.FailedPrecondition);
    expect((await h.client.listCustomSources({ org: ORG }, auth)).customSources).toHaveLength(SOURCES_PER_ORG);
  });

  it("never shows or changes another organization's source", async () => {
    const theirs = await createMemoryCustomSourceStore(h.tables).create(
      {
        id: randomUUID(),
        orgId: randomUUID(),
        orgSlug: "globex",
        name: "theirs",
        rules: [{ title: "'t'" }],
        auth: { secretInPath: false, basicAuth: false, secretHeader: "", signature: null },
        preset: "",
        credential: { hash: Buffer.alloc(32, 7), sealed: null, sealedBy: null },
      },
      SOURCES_PER_ORG,
      { orgId: "other", kind: "created", actor: "x", data: {} },
    );
    expect((await h.client.listCustomSources({ org: ORG }, auth)).customSources).toEqual([]);
    expect(await codeOf(h.client.getCustomSource({ org: ORG, id: theirs.id }, auth))).toBe(Code.NotFound);
    expect(await codeOf(h.client.deleteCustomSource({ org: ORG, id: theirs.id }, auth))).toBe(Code.NotFound);
    expect(await codeOf(h.client.rotateCustomSourceCredential({ org: ORG, id: theirs.id }, auth))).toBe(Code.NotFound);
    expect(await codeOf(h.client.getCustomSource({ org: ORG, id: "not-a-uuid" }, auth))).toBe(Code.NotFound);
    expect(h.tables.sources.map((row) => row.name)).toEqual(["theirs"]);
  });

  it("broadcasts a change to an existing source before answering, and moves its version on", async () => {
    const { source } = await h.client.createCustomSource({ org: ORG, name: "changing", rules: RULES }, auth);
    const updated = await h.client.updateCustomSource({ org: ORG, id: source!.id, rules: [{ title: "'v2'" }] }, auth);
    expect(h.tables.sources[0]!.version).toBe(2);
    expect(updated.rules.map((r) => r.title)).toEqual(["'v2'"]);
    await h.client.deleteCustomSource({ org: ORG, id: source!.id }, auth);
    expect(h.published).toEqual([source!.id, source!.id]);
    expect(h.tables.audits.map((a) => a.kind)).toEqual([AUDIT_KINDS.created, AUDIT_KINDS.updated, AUDIT_KINDS.deleted]);
    expect(await codeOf(h.client.getCustomSource({ org: ORG, id: source!.id }, auth))).toBe(Code.NotFound);
  });

  it("takes a delivery with the current credential only: a rotated or revoked one is refused and counted", async () => {
    const { source, credential } = await h.client.createCustomSource({ org: ORG, name: "delivering", rules: RULES }, auth);
    const deliver = (secret: string) =>
      h.client.deliverCustomSource(
        { sourceId: source!.id, body: new TextEncoder().encode(JSON.stringify({ host: "db-1", id: "e-1" })), contentType: "application/json" },
        { headers: { authorization: `Bearer ${secret}` } },
      );
    const answer = await deliver(credential!.secret);
    expect(answer.outcome).toBe("opened");
    expect(h.mapped[0]).toMatchObject({ alert: { title: "Disk full on db-1", attachIdentity: `custom:${source!.id}:db-1`, eventId: "e-1" } });

    const rotated = await h.client.rotateCustomSourceCredential({ org: ORG, id: source!.id }, auth);
    expect(rotated.secret).not.toBe(credential!.secret);
    expect(await codeOf(deliver(credential!.secret))).toBe(Code.Unauthenticated);
    expect(h.failures).toBe(1);
    expect((await deliver(rotated.secret)).outcome).toBe("opened");
    await h.client.revokeCustomSourceCredential({ org: ORG, id: source!.id }, auth);
    expect(await codeOf(deliver(rotated.secret))).toBe(Code.Unauthenticated);
    expect(h.failures).toBe(2);

    // What each answered delivery keeps: its payload and log row, the newest first.
    const payloads = await h.client.listCustomSourcePayloads({ org: ORG, id: source!.id }, auth);
    expect(payloads.payloads).toHaveLength(2);
    expect(payloads.payloads[0]!.headers.authorization).toBe("[redacted]");
    const log = await h.client.listCustomSourceDeliveries({ org: ORG, id: source!.id }, auth);
    expect(log.deliveries.map((d) => d.outcome)).toEqual(["opened", "opened"]);
  });

  it("refuses a sender's secret another source has, when made and when rotated", async () => {
    const secret = "a-sender-secret-of-enough-length";
    await h.client.createCustomSource({ org: ORG, name: "first", rules: RULES, secret }, auth);
    expect(await codeOf(h.client.createCustomSource({ org: ORG, name: "second", rules: RULES, secret }, auth))).toBe(Code.AlreadyExists);
    const { source } = await h.client.createCustomSource({ org: ORG, name: "third", rules: RULES }, auth);
    expect(await codeOf(h.client.rotateCustomSourceCredential({ org: ORG, id: source!.id, secret }, auth))).toBe(Code.AlreadyExists);
    expect(h.tables.audits.map((a) => a.kind)).toEqual([AUDIT_KINDS.created, AUDIT_KINDS.created]);
  });

  it("answers Unavailable in a process without the custom sources' tables", async () => {
    const peers = stubPeers();
    const handlers = createCustomSourceHandlers({
      clients: peers.clients,
      delivery: {
        admitBody: () => Promise.reject(new Error("not reached")),
        readJson: () => Promise.reject(new Error("not reached")),
        deliver: () => Promise.reject(new Error("not reached")),
      },
      failures: { add: () => Promise.reject(new Error("not reached")) },
      customSources: undefined,
    });
    const client = createClient(
      IntakeService,
      serveUnderTest((router) => router.service(IntakeService, handlers)),
    );
    expect(await codeOf(client.listCustomSources({ org: ORG }, auth))).toBe(Code.Unavailable);
  });
});
