import { createMemoryTables, type MemoryTables } from "../../testing/memory-tables.js";
import type { GroupingStore, OverrideRow } from "../store.js";

const DAY_MS = 86_400_000;

/**
 * Grouping overrides and generations in memory, for unit tests of override resolution and
 * windows. It keeps the rules the Postgres store keeps (store-contract.ts runs against both): one
 * override per organization and source, whose version moves on with each change; a generation
 * moves on only from the one the caller read; a read marks a generation in use at most daily.
 */
export function createMemoryGroupingStore(tables: MemoryTables = createMemoryTables()): GroupingStore & { tables: MemoryTables } {
  const key = (orgId: string, identity: string) => `${orgId}\n${identity}`;
  const rowOf = ({ source, attach_key, window_hours, version }: OverrideRow): OverrideRow => ({ source, attach_key, window_hours, version });
  const ofOrg = (orgId: string) => tables.overrides.filter((o) => o.orgId === orgId);

  async function generation(orgId: string, identity: string): Promise<number> {
    const held = tables.generations.get(key(orgId, identity));
    if (held && held.seenAt.getTime() < tables.now().getTime() - DAY_MS) held.seenAt = tables.now();
    return held?.generation ?? 0;
  }

  return {
    tables,

    async overrides(orgId) {
      return ofOrg(orgId).map(rowOf);
    },

    async list(orgId) {
      return ofOrg(orgId)
        .sort((a, b) => (a.source < b.source ? -1 : a.source > b.source ? 1 : 0))
        .map(rowOf);
    },

    async put(orgId, override, audit) {
      tables.transaction(() => {
        const held = tables.overrides.find((o) => o.orgId === orgId && o.source === override.source);
        if (held) Object.assign(held, { attach_key: override.attachKey, window_hours: override.windowHours, version: held.version + 1 });
        else tables.overrides.push({ orgId, source: override.source, attach_key: override.attachKey, window_hours: override.windowHours, version: 1 });
        tables.audits.push(audit);
      });
    },

    async delete(orgId, source, audit) {
      return tables.transaction(() => {
        const before = tables.overrides.length;
        tables.overrides = tables.overrides.filter((o) => !(o.orgId === orgId && o.source === source));
        if (tables.overrides.length === before) return false;
        tables.audits.push(audit);
        return true;
      });
    },

    generation,

    async moveOn(orgId, identity, from) {
      tables.transaction(() => {
        const held = tables.generations.get(key(orgId, identity));
        if (!held) tables.generations.set(key(orgId, identity), { generation: from + 1, seenAt: tables.now() });
        else if (held.generation === from) Object.assign(held, { generation: from + 1, seenAt: tables.now() });
      });
      return generation(orgId, identity);
    },
  };
}
