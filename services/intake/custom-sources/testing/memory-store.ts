import { createMemoryTables, type MemoryRecords, type MemoryTables, sourceChangeColumns } from "../../testing/memory-tables.js";
import {
  type CustomSourceRow,
  type CustomSourceStore,
  type DeliveryRecord,
  KEPT_DELIVERIES,
  KEPT_PAYLOADS,
  nameTaken,
  secretTaken,
  sourcesFull,
  type StoredCredential,
} from "../store.js";

/**
 * The custom sources in memory, for unit tests of the routes and deliveries. It keeps the rules
 * the Postgres store keeps (see CustomSourceStore, and store-contract.ts, which runs against both):
 * a name once per organization, a current secret once everywhere, the organization's limit, each
 * source's payloads and log in rings of slots, a change and its audit record together.
 */
export function createMemoryCustomSourceStore(tables: MemoryTables = createMemoryTables()): CustomSourceStore & { tables: MemoryTables } {
  const find = (orgId: string, id: string) => tables.sources.find((row) => row.org_id === orgId && row.id === id);
  const copy = (row: CustomSourceRow | undefined) => row && { ...row, rules: row.rules.map((rule) => ({ ...rule })) };
  const checkSecret = (hash: Buffer | null, id: string) => {
    if (hash && tables.sources.some((row) => row.id !== id && row.secret_hash?.equals(hash))) throw secretTaken();
  };
  const credentialColumns = (credential: StoredCredential) => ({
    secret_hash: credential.hash,
    secret_sealed: credential.sealed,
    secret_sealed_by: credential.sealedBy,
    credential_issued_at: tables.now(),
  });
  const recordsOf = (sourceId: string): MemoryRecords => {
    let held = tables.records.get(sourceId);
    if (!held) {
      held = { payloadSeq: 0n, deliverySeq: 0n, payloads: new Map(), deliveries: new Map() };
      tables.records.set(sourceId, held);
    }
    return held;
  };
  const newestFirst =
    <T extends { seq: string }>(at: (row: T) => Date) =>
    (a: T, b: T) =>
      at(b).getTime() - at(a).getTime() || (BigInt(b.seq) > BigInt(a.seq) ? 1 : BigInt(b.seq) < BigInt(a.seq) ? -1 : 0);

  return {
    tables,

    async create(source, atMost, audit) {
      return tables.transaction(() => {
        if (tables.sources.filter((row) => row.org_id === source.orgId).length >= atMost) throw sourcesFull(atMost);
        if (tables.sources.some((row) => row.org_id === source.orgId && row.name === source.name)) throw nameTaken(source.name);
        checkSecret(source.credential.hash, source.id);
        const row: CustomSourceRow = {
          id: source.id,
          org_id: source.orgId,
          org_slug: source.orgSlug,
          name: source.name,
          rules: source.rules.map((rule) => ({ ...rule })),
          version: 1,
          secret_in_path: source.auth.secretInPath,
          basic_auth: source.auth.basicAuth,
          preset: source.preset,
          description: source.description ?? "",
          secret_header: source.auth.secretHeader,
          signature: source.auth.signature,
          ...credentialColumns(source.credential),
          created_at: tables.now(),
        };
        tables.sources.push(row);
        tables.audits.push(audit);
        return copy(row)!;
      });
    },

    async list(orgId) {
      return tables.sources
        .filter((row) => row.org_id === orgId)
        .sort((a, b) => a.created_at.getTime() - b.created_at.getTime() || (a.id < b.id ? -1 : 1))
        .map((row) => copy(row)!);
    },

    async get(orgId, id) {
      return copy(find(orgId, id));
    },

    async byCredential(id, secretHash) {
      return copy(tables.sources.find((row) => row.id === id && row.secret_hash?.equals(secretHash)));
    },

    async byId(id) {
      return copy(tables.sources.find((row) => row.id === id && row.secret_hash !== null));
    },

    async update(orgId, id, change, audit) {
      return tables.transaction(() => {
        const row = find(orgId, id);
        if (!row) return undefined;
        Object.assign(row, {
          ...sourceChangeColumns(row, change.rules, change.auth),
          ...(change.description === undefined ? {} : { description: change.description }),
        });
        tables.audits.push(audit);
        return copy(row);
      });
    },

    async delete(orgId, id, audit) {
      tables.transaction(() => {
        const row = find(orgId, id);
        if (row) {
          tables.sources = tables.sources.filter((r) => r !== row);
          tables.records.delete(row.id);
        }
        tables.audits.push(audit);
      });
    },

    async rotate(orgId, id, credential, audit) {
      return tables.transaction(() => {
        const row = find(orgId, id);
        if (!row) return undefined;
        checkSecret(credential.hash, row.id);
        Object.assign(row, credentialColumns(credential));
        tables.audits.push(audit);
        return copy(row);
      });
    },

    async revoke(orgId, id, audit) {
      tables.transaction(() => {
        const row = find(orgId, id);
        if (row) Object.assign(row, { secret_hash: null, secret_sealed: null, secret_sealed_by: null });
        tables.audits.push(audit);
      });
    },

    async keepAndLogMany(records: DeliveryRecord[]) {
      const bySource = new Map<string, DeliveryRecord[]>();
      for (const r of records) bySource.set(r.sourceId, [...(bySource.get(r.sourceId) ?? []), r]);
      tables.transaction(() => {
        for (const [sourceId, rs] of bySource) {
          // A record whose source was deleted meanwhile is left out.
          if (!tables.sources.some((row) => row.id === sourceId)) continue;
          const held = recordsOf(sourceId);
          const payloadBase = held.payloadSeq;
          const deliveryBase = held.deliverySeq;
          held.payloadSeq += BigInt(rs.length);
          held.deliverySeq += BigInt(rs.length);
          rs.forEach((r, ord) => {
            if (ord >= rs.length - KEPT_PAYLOADS) {
              const seq = payloadBase + BigInt(ord);
              held.payloads.set(Number(seq % BigInt(KEPT_PAYLOADS)), { seq: seq.toString(), received_at: r.receivedAt, ...structuredClone(r.payload) });
            }
            if (ord >= rs.length - KEPT_DELIVERIES) {
              const seq = deliveryBase + BigInt(ord);
              const e = r.entry;
              held.deliveries.set(Number(seq % BigInt(KEPT_DELIVERIES)), {
                seq: seq.toString(),
                at: r.receivedAt,
                outcome: e.outcome,
                incident_id: e.incidentId ?? null,
                rule: e.rule ?? null,
                error: e.error ?? null,
                warnings: [...e.warnings],
                reason: e.reason ?? null,
              });
            }
          });
        }
      });
    },

    async payloads(sourceId) {
      return [...(tables.records.get(sourceId)?.payloads.values() ?? [])].sort(newestFirst((row) => row.received_at));
    },

    async payload(sourceId, seq) {
      const row = tables.records.get(sourceId)?.payloads.get(Number(seq % BigInt(KEPT_PAYLOADS)));
      return row && row.seq === seq.toString() ? row : undefined;
    },

    async deliveries(sourceId) {
      return [...(tables.records.get(sourceId)?.deliveries.values() ?? [])].sort(newestFirst((row) => row.at));
    },
  };
}
