import { randomUUID } from "node:crypto";
import { create, type JsonObject } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { CelScalar } from "@bufbuild/cel";
import type { Organization } from "../../../gen/warroom/identity/v1/identity_pb.js";
import { CorrelationSchema } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import type { IntakeService } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../../runtime/credentials/auth.js";
import type { Clients } from "../../runtime/transport/clients.js";
import { createRevocableCache } from "../../runtime/credentials/revocable-cache.js";
import { compiledByText } from "../../cel/compiled-by-text.js";
import { type Broadcast, CORRELATION_CHANGED } from "../../runtime/transport/broadcast.js";
import type { Sql, TransactionSql } from "../../runtime/data/database.js";
import { InvalidArgumentError, NotFoundError, UnavailableError } from "../../runtime/errors.js";
import { recordAudit } from "../../runtime/transport/events.js";
import type { Logger } from "../../runtime/observability/logger.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import type { AlertInit } from "../sources/index.js";
import { digestOf } from "../sources/normalized-alert.js";
import { compileMetered, evaluateMetered, fromCelValue, MAPPING_LIMITS, meteredEnvironment, type Program, toCelInput } from "../../cel/cel-mapping.js";

/**
 * Correlation across sources: one problem seen by several tools (a metrics monitor, the alert
 * router, an error tracker, a custom source) is one group of incidents, or one incident.
 *
 * Each alert of an organization that set correlation gets a key: its entity (`kind:id`), or the
 * value of the organization's CEL expression over the normalized alert. Alerts of one key arriving
 * less than the window apart are one group: a row per (organization, key) in
 * `intake.correlation_groups`, claimed or extended with one upsert, which Postgres serializes per
 * row, so concurrent deliveries on any number of replicas agree on one group. In `link` mode the
 * group's id goes with the delivery and an incident it opens keeps it; in `attach` mode the
 * delivery's attach identity becomes the group's, so the incident core's unique open identity lets
 * exactly one delivery open the group's incident and every other one attach to it.
 *
 * An organization that set nothing pays nothing per delivery: its (empty) settings are cached,
 * like grouping overrides, until a change to them is broadcast (CORRELATION_CHANGED).
 */

export const CORRELATION_MODES = ["link", "attach"] as const;
export type CorrelationMode = (typeof CORRELATION_MODES)[number];

export const CORRELATION_LIMITS = {
  /** The window when none is given. */
  defaultWindowMinutes: 30,
  /** The longest window: a week. */
  maxWindowMinutes: 7 * 24 * 60,
  /** Characters of a key kept as it is; a longer one is replaced by its digest. */
  keyCharacters: 400,
} as const;

/** The key expression's environment: the normalized alert, with a custom source mapping's budget. */
const KEY_ENVIRONMENT = meteredEnvironment({ alert: CelScalar.DYN }, MAPPING_LIMITS.costPerDelivery);

export interface CorrelationSettings {
  mode: CorrelationMode;
  windowMinutes: number;
  key: string;
}

interface SettingsRow {
  mode: CorrelationMode;
  window_minutes: number;
  key_expression: string;
  version: number;
}

/** Compiles a key expression; InvalidArgument naming `where` and what is wrong. */
export function compileCorrelationKey(expression: string, where: string): Program {
  return compileMetered(KEY_ENVIRONMENT, expression, where);
}

/** Checks settings from the API or a file; InvalidArgument naming the field (under `where`). */
export function checkCorrelationSettings(input: { mode: string; windowMinutes?: number; key?: string }, where = ""): CorrelationSettings {
  const mode = input.mode.trim();
  if (!(CORRELATION_MODES as readonly string[]).includes(mode)) {
    throw new InvalidArgumentError(
      `${where}mode: link (each source keeps its incident, linked as related) or attach (later sources attach to the first incident); to turn correlation off, DELETE /o/{org}/correlation`,
    );
  }
  const windowMinutes = input.windowMinutes || CORRELATION_LIMITS.defaultWindowMinutes;
  if (!Number.isInteger(windowMinutes) || windowMinutes < 1 || windowMinutes > CORRELATION_LIMITS.maxWindowMinutes) {
    throw new InvalidArgumentError(`${where}windowMinutes: 1 to ${CORRELATION_LIMITS.maxWindowMinutes} (a week)`);
  }
  const key = input.key?.trim() ?? "";
  if (key) compileCorrelationKey(key, `${where}key`);
  return { mode: mode as CorrelationMode, windowMinutes, key };
}

/** The organization's settings; undefined: correlation is off. */
export async function readCorrelationSettings(sql: Sql, orgId: string): Promise<CorrelationSettings | undefined> {
  const [row] = await sql<SettingsRow[]>`select mode, window_minutes, key_expression, version from intake.correlation_settings where org_id = ${orgId}`;
  return row ? { mode: row.mode, windowMinutes: row.window_minutes, key: row.key_expression } : undefined;
}

/** Writes the settings and their audit record in the caller's transaction. */
export async function writeCorrelationSettings(
  tx: TransactionSql,
  outbox: Outbox,
  actor: { orgId: string; email: string },
  settings: CorrelationSettings | undefined,
  via?: string,
): Promise<boolean> {
  const extra: JsonObject = via ? { via } : {};
  if (!settings) {
    const deleted = await tx`delete from intake.correlation_settings where org_id = ${actor.orgId} returning org_id`;
    if (deleted.length > 0) await recordAudit(outbox, tx, { orgId: actor.orgId, kind: "correlation.deleted", actor: actor.email, data: { ...extra } });
    return deleted.length > 0;
  }
  await tx`
    insert into intake.correlation_settings (org_id, mode, window_minutes, key_expression) values (${actor.orgId}, ${settings.mode}, ${settings.windowMinutes}, ${settings.key})
    on conflict (org_id) do update set mode = excluded.mode, window_minutes = excluded.window_minutes, key_expression = excluded.key_expression,
      version = intake.correlation_settings.version + 1`;
  await recordAudit(outbox, tx, {
    orgId: actor.orgId,
    kind: "correlation.set",
    actor: actor.email,
    data: { mode: settings.mode, windowMinutes: settings.windowMinutes, key: settings.key, ...extra },
  });
  return true;
}

/** The normalized alert as the key expression reads it. */
function alertForKey(alert: AlertInit): JsonObject {
  const view: JsonObject = {
    source: alert.source ?? "",
    kind: alert.kind ?? "",
    title: alert.title ?? "",
    severity: alert.severity ?? "",
    attachIdentity: alert.attachIdentity ?? "",
    eventId: alert.eventId ?? "",
    entity: alert.entity ? { kind: alert.entity.kind ?? "", id: alert.entity.id ?? "" } : null,
    summary: alert.summary ?? "",
    link: alert.link ?? "",
    alertRef: alert.alertRef ?? "",
    data: (alert.data as JsonObject | undefined) ?? {},
  };
  return view;
}

/**
 * The alert's correlation key: the value of the organization's expression (`key:<value>`), or
 * its entity (`entity:<kind>:<id>`) without one; empty: not correlated. A long key becomes its
 * digest, as long attach identities do.
 */
export function correlationKeyOf(program: Program | undefined, alert: AlertInit): { key: string } | { error: string } {
  let key: string;
  if (program) {
    const result = evaluateMetered(KEY_ENVIRONMENT, program, { alert: toCelInput(alertForKey(alert)) });
    if ("error" in result) return { error: result.error };
    const value = fromCelValue(result.value);
    if (value === null || value === undefined || value === "") return { key: "" };
    key = `key:${typeof value === "string" ? value : JSON.stringify(value)}`;
  } else {
    if (!alert.entity?.kind || !alert.entity.id) return { key: "" };
    key = `entity:${alert.entity.kind}:${alert.entity.id}`;
  }
  return { key: key.length > CORRELATION_LIMITS.keyCharacters ? `sha256:${digestOf([key])}` : key };
}

/** What correlation decided for one delivery. */
export interface Correlated {
  /** Link mode: the group an incident this delivery opens joins. */
  groupId?: string;
}

export interface Correlation {
  /**
   * Places the delivery in its key's group: in link mode answers the group, in attach mode rewrites
   * the alert's attach identity (and event identifier, scoped to its source) to the group's.
   */
  apply(org: Organization, alert: AlertInit): Promise<Correlated>;
}

type Settings = SettingsRow & { program?: Program };

export function createCorrelation(deps: { sql: Sql; logger: Logger; broadcast: Broadcast }): Correlation {
  const { sql, logger } = deps;
  // Each organization's settings (none, for most), read once and kept until a change to them is
  // broadcast; deliveries that miss together (after a change, during a storm) share one look-up.
  const cache = createRevocableCache<Settings>({ broadcast: deps.broadcast, subject: CORRELATION_CHANGED });
  const compiled = compiledByText((expression) => compileCorrelationKey(expression, "key"));

  // Never given up with the sender's hang-up, as the delivery it serves goes on.
  const settingsOf = (orgId: string): Promise<Settings | undefined> =>
    cache.get(orgId, orgId, async () => {
      const [row] = await sql<SettingsRow[]>`select mode, window_minutes, key_expression, version from intake.correlation_settings where org_id = ${orgId}`;
      return row && { ...row, ...(row.key_expression ? { program: compiled(row.key_expression) } : {}) };
    });

  /**
   * The key's group for an alert: the current one when the key's previous alert came less than
   * the window ago, else a new one. One upsert: concurrent alerts of a key wait on its row, so all
   * see the same group.
   */
  async function claimGroup(orgId: string, key: string, windowMinutes: number): Promise<string> {
    const [row] = await sql<{ group_id: string }[]>`
      insert into intake.correlation_groups as g (org_id, key, group_id, last_alert_at) values (${orgId}, ${key}, ${randomUUID()}, now())
      on conflict (org_id, key) do update set
        group_id = case when g.last_alert_at < now() - make_interval(mins => ${windowMinutes}) then excluded.group_id else g.group_id end,
        last_alert_at = greatest(g.last_alert_at, now())
      returning group_id`;
    return row!.group_id;
  }

  /** A notice that is not an alert follows the key's current group, and never starts one. */
  async function currentGroup(orgId: string, key: string, windowMinutes: number): Promise<string | undefined> {
    const [row] = await sql<{ group_id: string }[]>`
      select group_id from intake.correlation_groups
      where org_id = ${orgId} and key = ${key} and last_alert_at >= now() - make_interval(mins => ${windowMinutes})`;
    return row?.group_id;
  }

  return {
    async apply(org, alert) {
      const settings = await settingsOf(org.id);
      if (!settings) return {};
      const keyed = correlationKeyOf(settings.program, alert);
      if ("error" in keyed) {
        // A key that fails never merges anything: the delivery is simply not correlated.
        logger.warn({ source: alert.source, error: keyed.error }, "correlation key failed: the delivery is not correlated");
        return {};
      }
      const key = keyed.key;
      if (!key) return {};
      if (settings.mode === "link") {
        // Only an alert opens an incident, so only an alert needs a group.
        if (alert.kind !== "alert") return {};
        return { groupId: await claimGroup(org.id, key, settings.window_minutes) };
      }
      const groupId =
        alert.kind === "alert" ? await claimGroup(org.id, key, settings.window_minutes) : await currentGroup(org.id, key, settings.window_minutes);
      if (!groupId) return {};
      const source = alert.source ?? "";
      // The timeline says which source each entry came from, and under what identity of its own.
      alert.data = { ...(alert.data ?? {}), correlation: { source, attachIdentity: alert.attachIdentity ?? "", key } };
      alert.attachIdentity = `correlated:${groupId}`;
      // Two sources' identifiers may be equal by chance; on one incident they must not meet.
      if (alert.eventId) alert.eventId = `${source}:${alert.eventId}`;
      return {};
    },
  };
}

/** Get, put and delete the organization's correlation settings. */
export function createCorrelationHandlers(deps: {
  sql: Sql | undefined;
  outbox: Outbox | undefined;
  clients: Clients;
  /** Every replica hears of a change here before it is answered (CORRELATION_CHANGED). */
  broadcast: Broadcast;
}): Pick<ServiceImpl<typeof IntakeService>, "getCorrelation" | "putCorrelation" | "deleteCorrelation"> {
  const { clients, broadcast } = deps;
  function need<T>(value: T | undefined): T {
    if (value === undefined) throw new UnavailableError("correlation is not available in this process");
    return value;
  }
  return {
    async getCorrelation(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const settings = await readCorrelationSettings(need(deps.sql), principal.orgId);
      return create(CorrelationSchema, settings ?? {});
    },

    async putCorrelation(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const settings = checkCorrelationSettings({ mode: req.mode, windowMinutes: req.windowMinutes, key: req.key });
      const sql = need(deps.sql);
      const outbox = need(deps.outbox);
      await sql.begin((tx) => writeCorrelationSettings(tx, outbox, principal, settings));
      outbox.poke();
      await broadcast.publish(CORRELATION_CHANGED, principal.orgId);
      return create(CorrelationSchema, settings);
    },

    async deleteCorrelation(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const sql = need(deps.sql);
      const outbox = need(deps.outbox);
      const deleted = await sql.begin((tx) => writeCorrelationSettings(tx, outbox, principal, undefined));
      outbox.poke();
      if (!deleted) throw new NotFoundError("correlation is not set for this organization");
      await broadcast.publish(CORRELATION_CHANGED, principal.orgId);
      return {};
    },
  };
}
