import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { toConnectError } from "../../runtime/errors.js";
import { createLogger } from "../../runtime/observability/logger.js";
import type { AuditRecord } from "../../runtime/transport/events.js";
import type { ConfigStore } from "../config-as-code/store.js";
import type { SourceAuth } from "../custom-sources/source-auth.js";
import { type CustomSourceStore, type DeliveryRecord, KEPT_PAYLOADS, type NewCustomSource } from "../custom-sources/store.js";
import type { GroupingStore } from "../grouping/store.js";

/**
 * The contract of the custom-source, grouping and configuration stores, run against the memory
 * stores (memory-stores.unit.test.ts) and the Postgres stores (postgres-stores.test.ts), so the
 * memory stores the unit tests use cannot drift from the tables. Each test works in organizations
 * of its own, so the Postgres run shares one database.
 */
export interface Stores {
  customSources: CustomSourceStore;
  grouping: GroupingStore;
  config: ConfigStore;
  /** The audit records written so far of one organization, in the order written. */
  audits(orgId: string): Promise<AuditRecord[]>;
}

const NO_AUTH: SourceAuth = { secretInPath: false, basicAuth: false, secretHeader: "", signature: null };
const SIGNED: SourceAuth = {
  ...NO_AUTH,
  signature: {
    header: "x-signature",
    algorithm: "sha256",
    prefix: "",
    encoding: "hex",
    timestampHeader: "",
    toleranceSeconds: 300,
    signedContent: "body",
    idHeader: "",
  },
};
const logger = createLogger("silent", "store-contract");

/** The Connect code an error thrown by a store is answered with. */
async function codeOf(call: Promise<unknown>): Promise<Code> {
  try {
    await call;
  } catch (err) {
    return (err instanceof ConnectError ? err : toConnectError(err, logger, "store-contract")).code;
  }
  throw new Error("the call succeeded");
}

function newSource(orgId: string, name: string, secret = randomUUID()): NewCustomSource {
  return {
    id: randomUUID(),
    orgId,
    orgSlug: `org-${orgId.slice(0, 8)}`,
    name,
    rules: [{ title: "'t'" }],
    auth: NO_AUTH,
    preset: "",
    credential: { hash: Buffer.from(secret.padEnd(32, "0").slice(0, 32)), sealed: null, sealedBy: null },
  };
}

const audit = (orgId: string, kind: string, data = {}): AuditRecord => ({ orgId, kind, actor: "admin@example.test", data });

function record(sourceId: string, n: number): DeliveryRecord {
  return {
    sourceId,
    receivedAt: new Date(Date.UTC(2026, 10, 28) + n),
    payload: { body: { n }, headers: { "x-n": String(n) }, query: {}, truncated: false },
    entry: { outcome: "opened", warnings: [`w${n}`] },
  };
}

export function describeStoreContract(label: string, open: () => Stores) {
  describe(`the custom-source store (${label})`, () => {
    it("keeps a source for its organization alone, and lists an organization's sources in the order they were made", async () => {
      const { customSources: store, audits } = open();
      const org = randomUUID();
      const other = randomUUID();
      const first = await store.create(newSource(org, "first"), 50, audit(org, "custom_source.created"));
      const second = await store.create(newSource(org, "second"), 50, audit(org, "custom_source.created"));
      expect(first.version).toBe(1);
      expect((await store.list(org)).map((row) => row.name)).toEqual(["first", "second"]);
      expect((await store.get(org, second.id))?.name).toBe("second");
      expect(await store.get(other, second.id)).toBeUndefined();
      expect(await store.list(other)).toEqual([]);
      expect((await audits(org)).map((a) => a.kind)).toEqual(["custom_source.created", "custom_source.created"]);
    });

    it("refuses a second source of one name in an organization, not in another, and writes no audit record for a refusal", async () => {
      const { customSources: store, audits } = open();
      const org = randomUUID();
      const other = randomUUID();
      await store.create(newSource(org, "dup"), 50, audit(org, "created"));
      expect(await codeOf(store.create(newSource(org, "dup"), 50, audit(org, "created")))).toBe(Code.AlreadyExists);
      await store.create(newSource(other, "dup"), 50, audit(other, "created"));
      expect(await audits(org)).toHaveLength(1);
    });

    it("refuses a secret another source has, in any organization, when made and when rotated", async () => {
      const { customSources: store } = open();
      const org = randomUUID();
      const secret = randomUUID();
      const held = newSource(org, "holder", secret);
      await store.create(held, 50, audit(org, "created"));
      const taken = await codeOf(store.create(newSource(randomUUID(), "copier", secret), 50, audit(org, "created")));
      expect(taken).toBe(Code.AlreadyExists);
      const other = await store.create(newSource(org, "other"), 50, audit(org, "created"));
      expect(await codeOf(store.rotate(org, other.id, held.credential, audit(org, "rotated")))).toBe(Code.AlreadyExists);
      // Its own secret again is no conflict.
      expect(await store.rotate(org, held.id, held.credential, audit(org, "rotated"))).toBeDefined();
    });

    it("holds an organization to its limit, counted per organization", async () => {
      const { customSources: store } = open();
      const org = randomUUID();
      await store.create(newSource(org, "a"), 2, audit(org, "created"));
      await store.create(newSource(org, "b"), 2, audit(org, "created"));
      expect(await codeOf(store.create(newSource(org, "c"), 2, audit(org, "created")))).toBe(Code.FailedPrecondition);
      await store.create(newSource(randomUUID(), "c"), 2, audit(org, "created"));
      expect(await store.list(org)).toHaveLength(2);
    });

    it("finds a source by its current credential only; rotating and revoking end the old one", async () => {
      const { customSources: store } = open();
      const org = randomUUID();
      const made = newSource(org, "cred");
      const row = await store.create(made, 50, audit(org, "created"));
      expect((await store.byCredential(row.id, made.credential.hash))?.id).toBe(row.id);
      expect((await store.byId(row.id))?.id).toBe(row.id);
      const next = newSource(org, "unused").credential;
      await store.rotate(org, row.id, next, audit(org, "rotated"));
      expect(await store.byCredential(row.id, made.credential.hash)).toBeUndefined();
      expect((await store.byCredential(row.id, next.hash))?.id).toBe(row.id);
      await store.revoke(org, row.id, audit(org, "revoked"));
      expect(await store.byCredential(row.id, next.hash)).toBeUndefined();
      expect(await store.byId(row.id)).toBeUndefined();
      expect((await store.get(org, row.id))?.secret_hash).toBeNull();
    });

    it("updates a source's rules and auth, moving its version on, within its organization only", async () => {
      const { customSources: store, audits } = open();
      const org = randomUUID();
      const row = await store.create(newSource(org, "upd"), 50, audit(org, "created"));
      expect(await store.update(randomUUID(), row.id, { rules: [], auth: NO_AUTH }, audit(org, "updated"))).toBeUndefined();
      const updated = await store.update(org, row.id, { rules: [{ title: "'new'" }], auth: { ...NO_AUTH, secretHeader: "x-token" } }, audit(org, "updated"));
      expect(updated?.version).toBe(2);
      expect(updated?.rules).toEqual([{ title: "'new'" }]);
      expect(updated?.secret_header).toBe("x-token");
      // The refused update (another organization's) wrote no record.
      expect((await audits(org)).map((a) => a.kind)).toEqual(["created", "updated"]);
    });

    it("keeps each source's newest payloads in its ring, numbered on, and a deleted source's records go with it", async () => {
      const { customSources: store } = open();
      const org = randomUUID();
      const busy = await store.create(newSource(org, "busy"), 50, audit(org, "created"));
      const gone = await store.create(newSource(org, "gone"), 50, audit(org, "created"));
      await store.keepAndLogMany([record(busy.id, 0), record(busy.id, 1), record(gone.id, 2)]);
      await store.keepAndLogMany(Array.from({ length: KEPT_PAYLOADS + 5 }, (_, i) => record(busy.id, i + 2)));
      const kept = await store.payloads(busy.id);
      expect(kept).toHaveLength(KEPT_PAYLOADS);
      expect(kept.map((p) => (p.body as { n: number }).n)).toEqual(Array.from({ length: KEPT_PAYLOADS }, (_, i) => KEPT_PAYLOADS + 6 - i));
      expect(kept[0]!.seq).toBe(String(KEPT_PAYLOADS + 6));
      expect(kept[0]!.headers).toEqual({ "x-n": String(KEPT_PAYLOADS + 6) });
      expect((await store.payload(busy.id, BigInt(KEPT_PAYLOADS + 6)))?.body).toEqual({ n: KEPT_PAYLOADS + 6 });
      expect(await store.payload(busy.id, 1n)).toBeUndefined();
      const log = await store.deliveries(busy.id);
      expect(log).toHaveLength(KEPT_PAYLOADS + 7);
      expect(log[0]).toMatchObject({ seq: String(KEPT_PAYLOADS + 6), outcome: "opened", warnings: [`w${KEPT_PAYLOADS + 6}`], incident_id: null });
      await store.delete(org, gone.id, audit(org, "deleted"));
      expect(await store.get(org, gone.id)).toBeUndefined();
      expect(await store.payloads(gone.id)).toEqual([]);
      // A record whose source is gone is left out; the others of its batch are kept.
      await store.keepAndLogMany([record(gone.id, 100), record(busy.id, 101)]);
      expect(await store.payloads(gone.id)).toEqual([]);
      expect((await store.payloads(busy.id))[0]!.body).toEqual({ n: 101 });
    });
  });

  describe(`the grouping store (${label})`, () => {
    it("keeps one override per organization and source, its version moving on, listed by source", async () => {
      const { grouping: store, audits } = open();
      const org = randomUUID();
      await store.put(org, { source: "zabbix", attachKey: "body.host", windowHours: 0 }, audit(org, "grouping_override.set"));
      await store.put(org, { source: "alert-router", attachKey: "", windowHours: 4 }, audit(org, "grouping_override.set"));
      await store.put(org, { source: "zabbix", attachKey: "body.service", windowHours: 2 }, audit(org, "grouping_override.set"));
      expect(await store.list(org)).toEqual([
        { source: "alert-router", attach_key: "", window_hours: 4, version: 1 },
        { source: "zabbix", attach_key: "body.service", window_hours: 2, version: 2 },
      ]);
      expect(await store.overrides(randomUUID())).toEqual([]);
      expect(await store.delete(randomUUID(), "zabbix", audit(org, "grouping_override.deleted"))).toBe(false);
      expect(await store.delete(org, "zabbix", audit(org, "grouping_override.deleted"))).toBe(true);
      expect(await store.delete(org, "zabbix", audit(org, "grouping_override.deleted"))).toBe(false);
      expect((await store.overrides(org)).map((o) => o.source)).toEqual(["alert-router"]);
      // A delete that found nothing wrote no record.
      expect((await audits(org)).map((a) => a.kind)).toEqual([...Array(3).fill("grouping_override.set"), "grouping_override.deleted"]);
    });

    it("moves a generation on only from the one read, so replicas that race agree on the next", async () => {
      const { grouping: store } = open();
      const org = randomUUID();
      expect(await store.generation(org, "id-1")).toBe(0);
      expect(await store.moveOn(org, "id-1", 0)).toBe(1);
      // A replica that read 0 too finds it moved already.
      expect(await store.moveOn(org, "id-1", 0)).toBe(1);
      expect(await store.moveOn(org, "id-1", 1)).toBe(2);
      expect(await store.generation(org, "id-1")).toBe(2);
      expect(await store.generation(randomUUID(), "id-1")).toBe(0);
      expect(await store.generation(org, "id-2")).toBe(0);
    });
  });

  describe(`the configuration store (${label})`, () => {
    it("applies a plan's writes together, and the rooms' stores see them", async () => {
      const stores = open();
      const org = randomUUID();
      const actor = { orgId: org, email: "admin@example.test" };
      const made = { ...newSource(org, "from-file"), description: "made by a file" };
      const { changedSources } = await stores.config.apply(org, [
        { kind: "createSource", source: made, audit: audit(org, "custom_source.created") },
        { kind: "createSource", source: newSource(org, "also"), audit: audit(org, "custom_source.created") },
        { kind: "putOverride", override: { source: "zabbix", attachKey: "body.host", windowHours: 1 }, audit: audit(org, "grouping_override.set") },
        { kind: "correlation", settings: { mode: "link", windowMinutes: 30, key: "" }, actor },
      ]);
      expect(changedSources).toEqual([]);
      const state = await stores.config.current(org);
      expect(state.sources.map((row) => [row.name, row.description])).toEqual([
        ["also", ""],
        ["from-file", "made by a file"],
      ]);
      expect(state.overrides).toEqual([{ source: "zabbix", attach_key: "body.host", window_hours: 1 }]);
      expect(state.correlation).toEqual({ mode: "link", windowMinutes: 30, key: "" });
      expect((await stores.customSources.byCredential(made.id, made.credential.hash))?.name).toBe("from-file");
      expect((await stores.grouping.overrides(org))[0]?.version).toBe(1);
      expect((await stores.config.current(randomUUID())).sources).toEqual([]);

      const second = await stores.config.apply(org, [
        {
          kind: "updateSource",
          source: { name: "from-file", rules: [{ title: "'v2'" }], auth: NO_AUTH, preset: "x", description: "changed by a file" },
          audit: audit(org, "custom_source.updated"),
        },
        { kind: "deleteSource", name: "also", audit: audit(org, "custom_source.deleted") },
        { kind: "deleteOverride", source: "zabbix", audit: audit(org, "grouping_override.deleted") },
        { kind: "correlation", settings: undefined, actor },
      ]);
      expect(second.changedSources).toContain(made.id);
      expect(second.changedSources).toHaveLength(2);
      const after = await stores.config.current(org);
      expect(after.sources.map((row) => [row.name, row.version, row.preset, row.description])).toEqual([["from-file", 2, "x", "changed by a file"]]);
      expect(after.overrides).toEqual([]);
      expect(after.correlation).toBeUndefined();
      expect((await stores.audits(org)).map((a) => a.kind)).toEqual([
        "custom_source.created",
        "custom_source.created",
        "grouping_override.set",
        "correlation.set",
        "custom_source.updated",
        "custom_source.deleted",
        "grouping_override.deleted",
        "correlation.deleted",
      ]);
    });

    it("undoes the whole plan when a write is refused: a signature for a source whose secret is kept only as a hash", async () => {
      const stores = open();
      const org = randomUUID();
      await stores.customSources.create(newSource(org, "hashed"), 50, audit(org, "custom_source.created"));
      const refused = stores.config.apply(org, [
        { kind: "putOverride", override: { source: "zabbix", attachKey: "body.host", windowHours: 0 }, audit: audit(org, "grouping_override.set") },
        { kind: "updateSource", source: { name: "hashed", rules: [], auth: SIGNED, preset: "", description: "" }, audit: audit(org, "custom_source.updated") },
      ]);
      expect(await codeOf(refused)).toBe(Code.FailedPrecondition);
      const state = await stores.config.current(org);
      expect(state.overrides).toEqual([]);
      expect(state.sources[0]).toMatchObject({ version: 1, signature: null });
      expect((await stores.audits(org)).map((a) => a.kind)).toEqual(["custom_source.created"]);
    });
  });
}
