import type { Sql } from "../../runtime/data/database.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import { type AuditRecord, recordAudit } from "../../runtime/transport/events.js";
import { type CorrelationSettings, readCorrelationSettings, writeCorrelationSettings } from "../correlation/correlation.js";
import { unsealedForSignature } from "../custom-sources/custom-source-records.js";
import type { SourceAuth } from "../custom-sources/source-auth.js";
import { type CustomSourceRow, type NewCustomSource, type RuleJson, signatureColumn } from "../custom-sources/store.js";
import type { OverrideSetting } from "../grouping/store.js";

/** What a configuration file is compared with: the organization's sources by name, its overrides by source, its correlation. */
export interface ConfigState {
  sources: CustomSourceRow[];
  overrides: { source: string; attach_key: string; window_hours: number }[];
  correlation: CorrelationSettings | undefined;
}

/** A source as a configuration file sets it, found by its name. */
export interface SourceUpdate {
  name: string;
  rules: RuleJson[];
  auth: SourceAuth;
  preset: string;
  /** Written as given: empty clears it. */
  description: string;
}

/** One change of a plan, as it is written; each writes its audit record (`correlation` writes its own). */
export type ConfigWrite =
  | { kind: "createSource"; source: NewCustomSource; audit: AuditRecord }
  | { kind: "updateSource"; source: SourceUpdate; audit: AuditRecord }
  | { kind: "deleteSource"; name: string; audit: AuditRecord }
  | { kind: "putOverride"; override: OverrideSetting; audit: AuditRecord }
  | { kind: "deleteOverride"; source: string; audit: AuditRecord }
  | { kind: "correlation"; settings: CorrelationSettings | undefined; actor: { orgId: string; email: string } };

/**
 * What configuration as code needs of intake's tables: the state a file is planned against, and
 * a plan's writes to custom sources, grouping overrides and correlation applied all at once.
 * (Heartbeats and maintenance windows are their own services': config-schedules.ts calls them.)
 */
export interface ConfigStore {
  current(orgId: string): Promise<ConfigState>;
  /**
   * Applies `writes` in order in one transaction, under the organization's lock on creating
   * sources, and answers the ids of the sources updated or deleted (their cached copies are to be
   * dropped). An update that turns on a signature for a source whose secret is kept only as a
   * hash refuses the whole plan (unsealedForSignature), as does any other failed write.
   */
  apply(orgId: string, writes: ConfigWrite[]): Promise<{ changedSources: string[] }>;
}

/** Configuration as code on Postgres; audit records go to `outbox` in the same transaction. */
export function createPostgresConfigStore(sql: Sql, outbox: Outbox): ConfigStore {
  return {
    async current(orgId) {
      const sources = await sql<CustomSourceRow[]>`select * from intake.custom_sources where org_id = ${orgId} order by name`;
      const overrides = await sql<{ source: string; attach_key: string; window_hours: number }[]>`
        select source, attach_key, window_hours from intake.grouping_overrides where org_id = ${orgId} order by source`;
      const correlation = await readCorrelationSettings(sql, orgId);
      return { sources, overrides, correlation };
    },

    async apply(orgId, writes) {
      const changedSources: string[] = [];
      await sql.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock(hashtext(${`custom-sources:${orgId}`}))`;
        for (const w of writes) {
          if (w.kind === "createSource") {
            const { source } = w;
            const { auth, credential } = source;
            await tx`
              insert into intake.custom_sources (id, org_id, org_slug, name, rules, secret_in_path, basic_auth, secret_header, signature, preset,
                                                 description, secret_hash, secret_sealed, secret_sealed_by, credential_issued_at)
              values (${source.id}, ${orgId}, ${source.orgSlug}, ${source.name}, ${tx.json(source.rules)}, ${auth.secretInPath}, ${auth.basicAuth},
                      ${auth.secretHeader}, ${signatureColumn(tx, auth)}, ${source.preset}, ${source.description ?? ""}, ${credential.hash}, ${credential.sealed},
                      ${credential.sealedBy}, now())`;
          } else if (w.kind === "updateSource") {
            const { source } = w;
            const updated = await tx<{ id: string; secret_sealed: Buffer | null }[]>`
              update intake.custom_sources set rules = ${tx.json(source.rules)}, version = version + 1, secret_in_path = ${source.auth.secretInPath},
                basic_auth = ${source.auth.basicAuth}, secret_header = ${source.auth.secretHeader}, signature = ${signatureColumn(tx, source.auth)},
                preset = ${source.preset}, description = ${source.description}
              where org_id = ${orgId} and name = ${source.name} returning id, secret_sealed`;
            if (source.auth.signature && updated.some((row) => !row.secret_sealed)) throw unsealedForSignature();
            changedSources.push(...updated.map((row) => row.id));
          } else if (w.kind === "deleteSource") {
            const deleted = await tx<{ id: string }[]>`delete from intake.custom_sources where org_id = ${orgId} and name = ${w.name} returning id`;
            changedSources.push(...deleted.map((row) => row.id));
          } else if (w.kind === "putOverride") {
            const o = w.override;
            await tx`
              insert into intake.grouping_overrides (org_id, source, attach_key, window_hours) values (${orgId}, ${o.source}, ${o.attachKey}, ${o.windowHours})
              on conflict (org_id, source) do update set attach_key = excluded.attach_key, window_hours = excluded.window_hours,
                version = intake.grouping_overrides.version + 1`;
          } else if (w.kind === "deleteOverride") {
            await tx`delete from intake.grouping_overrides where org_id = ${orgId} and source = ${w.source}`;
          } else {
            await writeCorrelationSettings(tx, outbox, w.actor, w.settings, "config");
          }
          if (w.kind !== "correlation") await recordAudit(outbox, tx, w.audit);
        }
      });
      return { changedSources };
    },
  };
}
