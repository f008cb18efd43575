import { unsealedForSignature } from "../../custom-sources/custom-source-records.js";
import { nameTaken, secretTaken } from "../../custom-sources/store.js";
import { createMemoryTables, type MemoryTables, sourceChangeColumns } from "../../testing/memory-tables.js";
import type { ConfigStore } from "../store.js";

/**
 * Configuration as code over the memory tables the custom-source and grouping memory stores
 * share: a plan's writes all at once or none (a failed write undoes the ones before it), as the
 * Postgres store's one transaction does (store-contract.ts runs against both).
 */
export function createMemoryConfigStore(tables: MemoryTables = createMemoryTables()): ConfigStore & { tables: MemoryTables } {
  return {
    tables,

    async current(orgId) {
      const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
      return {
        sources: tables.sources
          .filter((row) => row.org_id === orgId)
          .sort(byName)
          .map((row) => ({ ...row })),
        overrides: tables.overrides
          .filter((o) => o.orgId === orgId)
          .sort((a, b) => (a.source < b.source ? -1 : a.source > b.source ? 1 : 0))
          .map((o) => ({ source: o.source, attach_key: o.attach_key, window_hours: o.window_hours })),
        correlation: tables.correlation.get(orgId),
      };
    },

    async apply(orgId, writes) {
      const changedSources: string[] = [];
      tables.transaction(() => {
        for (const w of writes) {
          if (w.kind === "createSource") {
            const { source } = w;
            // The table's own constraints: a name once per organization, a secret once everywhere.
            if (tables.sources.some((row) => row.org_id === orgId && row.name === source.name)) throw nameTaken(source.name);
            if (tables.sources.some((row) => row.secret_hash?.equals(source.credential.hash))) throw secretTaken();
            tables.sources.push({
              id: source.id,
              org_id: orgId,
              org_slug: source.orgSlug,
              name: source.name,
              description: source.description ?? "",
              rules: source.rules.map((rule) => ({ ...rule })),
              version: 1,
              secret_in_path: source.auth.secretInPath,
              basic_auth: source.auth.basicAuth,
              secret_header: source.auth.secretHeader,
              signature: source.auth.signature,
              preset: source.preset,
              secret_hash: source.credential.hash,
              secret_sealed: source.credential.sealed,
              secret_sealed_by: source.credential.sealedBy,
              credential_issued_at: tables.now(),
              created_at: tables.now(),
            });
          } else if (w.kind === "updateSource") {
            const { source } = w;
            const row = tables.sources.find((r) => r.org_id === orgId && r.name === source.name);
            if (row) {
              Object.assign(row, { ...sourceChangeColumns(row, source.rules, source.auth), preset: source.preset, description: source.description });
              if (source.auth.signature && !row.secret_sealed) throw unsealedForSignature();
              changedSources.push(row.id);
            }
          } else if (w.kind === "deleteSource") {
            const row = tables.sources.find((r) => r.org_id === orgId && r.name === w.name);
            if (row) {
              tables.sources = tables.sources.filter((r) => r !== row);
              tables.records.delete(row.id);
              changedSources.push(row.id);
            }
          } else if (w.kind === "putOverride") {
            const o = w.override;
            const held = tables.overrides.find((x) => x.orgId === orgId && x.source === o.source);
            if (held) Object.assign(held, { attach_key: o.attachKey, window_hours: o.windowHours, version: held.version + 1 });
            else tables.overrides.push({ orgId, source: o.source, attach_key: o.attachKey, window_hours: o.windowHours, version: 1 });
          } else if (w.kind === "deleteOverride") {
            tables.overrides = tables.overrides.filter((x) => !(x.orgId === orgId && x.source === w.source));
          } else {
            // As writeCorrelationSettings writes them: the settings and their audit record.
            const { actor, settings } = w;
            if (!settings) {
              if (tables.correlation.delete(actor.orgId)) {
                tables.audits.push({ orgId: actor.orgId, kind: "correlation.deleted", actor: actor.email, data: { via: "config" } });
              }
            } else {
              tables.correlation.set(actor.orgId, { ...settings });
              tables.audits.push({
                orgId: actor.orgId,
                kind: "correlation.set",
                actor: actor.email,
                data: { mode: settings.mode, windowMinutes: settings.windowMinutes, key: settings.key, via: "config" },
              });
            }
          }
          if (w.kind !== "correlation") tables.audits.push(w.audit);
        }
      });
      return { changedSources };
    },
  };
}
