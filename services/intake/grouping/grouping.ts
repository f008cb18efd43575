import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { Organization } from "../../../gen/warroom/identity/v1/identity_pb.js";
import { GroupingOverrideSchema, ListGroupingOverridesResponseSchema } from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import type { IntakeService } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { isSourceBadge } from "../../domain/vocabulary.js";
import { ADMINS, ANY_MEMBER, authorize } from "../../runtime/credentials/auth.js";
import type { Clients } from "../../runtime/transport/clients.js";
import { InvalidArgumentError, NotFoundError } from "../../runtime/errors.js";
import type { Logger } from "../../runtime/observability/logger.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import { createRevocableCache } from "../../runtime/credentials/revocable-cache.js";
import { compiledByText } from "../../cel/compiled-by-text.js";
import { type Broadcast, GROUPING_OVERRIDES_CHANGED } from "../../runtime/transport/broadcast.js";
import type { AlertInit } from "../sources/index.js";
import { digestOf } from "../sources/normalized-alert.js";
import { type CompiledRules, evaluateRules } from "../../cel/cel-mapping.js";
import { compileAttachKey } from "../custom-sources/custom-source-records.js";
import { exceedsBytes, LARGE_BODY_BYTES, type LargeBodies, OffloadedBody } from "../custom-sources/large-bodies.js";
import type { GroupingStore, OverrideRow } from "./store.js";

/** The longest grouping window: a year. */
const MAX_WINDOW_HOURS = 24 * 366;

/** An organization's grouping overrides applied to each delivery before the incident core sees it. */
export interface Grouping {
  /** With `dryRun` (a preview) nothing is written: the next generation is only named. */
  apply(org: Organization, alert: AlertInit, body: unknown, options?: { dryRun?: boolean }): Promise<void>;
}

/** An organization's overrides by source, each attach key compiled. */
type Overrides = Map<string, OverrideRow & { compiled?: CompiledRules }>;

/**
 * Grouping overrides: per organization and source badge, a CEL attach key replacing the source's
 * own, and a window past which a delivery opens a new incident instead of attaching. With nothing
 * configured a delivery is untouched.
 *
 * The window never needs the incident core to change: the identity handed to it carries a
 * generation (`<identity>#g<n>`, none for the first). When a trigger finds its generation's open
 * incident opened longer ago than the window, it moves the generation on with a conditional
 * update, so replicas that race agree on the next one, and the core's unique open identity lets
 * exactly one of them open it.
 */
export function createGrouping(deps: {
  store: GroupingStore;
  clients: Clients;
  logger: Logger;
  /** Where changes to an organization's overrides are heard (GROUPING_OVERRIDES_CHANGED). */
  broadcast: Broadcast;
  /** Worker threads for large bodies (INTAKE_LARGE_BODY_WORKERS); none: every key is read on the event loop. */
  largeBodies?: LargeBodies | undefined;
}): Grouping {
  const { store, clients, logger, largeBodies } = deps;
  // Each organization's overrides (none, for most), read once and kept until a change to them is
  // broadcast: a delivery of an organization without overrides runs no statement for them.
  const cache = createRevocableCache<Overrides>({ broadcast: deps.broadcast, subject: GROUPING_OVERRIDES_CHANGED });
  const compiled = compiledByText(compileAttachKey);

  // Never given up with the sender's hang-up: the delivery goes on (its answer is kept for the
  // retry), and it must go on with the organization's grouping.
  const overridesOf = async (orgId: string): Promise<Overrides> =>
    (await cache.get(
      orgId,
      orgId,
      async () =>
        new Map((await store.overrides(orgId)).map((row) => [row.source, { ...row, ...(row.attach_key ? { compiled: compiled(row.attach_key) } : {}) }])),
    )) ?? new Map();

  return {
    async apply(org, alert, body, options) {
      const overrides = await overridesOf(org.id);
      const override = overrides.get(alert.source ?? "");
      if (!override) return;
      if (override.compiled) {
        // A large body's key is read on a worker thread: a custom source's was never parsed on the
        // event loop; a built-in source's is posted to the thread as parsed. A full queue refuses
        // the delivery (ShareExceeded, with Retry-After) rather than group it otherwise.
        const result =
          body instanceof OffloadedBody
            ? await body.attachKey(override.attach_key)
            : largeBodies && exceedsBytes(body, LARGE_BODY_BYTES)
              ? await largeBodies.evaluate(org.id, { rules: { attachKey: override.attach_key }, body, headers: {}, query: {}, receivedAtMs: Date.now() })
              : evaluateRules(override.compiled, { body, headers: {}, query: {}, receivedAt: new Date() });
        const key = result.fields?.attachKey;
        // A key that fails or is empty keeps the source's own: an override never merges unrelated alerts.
        if (key) alert.attachIdentity = `override:${alert.source}:${key.length > 400 ? `sha256:${digestOf([key])}` : key}`;
        else if (result.error) logger.warn({ source: alert.source, error: result.error }, "grouping override failed: the source's own grouping applies");
      }
      const identity = alert.attachIdentity ?? "";
      if (override.window_hours <= 0 || identity === "") return;
      let generation = await store.generation(org.id, identity);
      if (alert.kind === "alert") {
        const withGeneration = (g: number) => (g === 0 ? identity : `${identity}#g${g}`);
        const open = await clients.incidents.findLatestOpen({ orgId: org.id, source: alert.source ?? "", attachIdentity: withGeneration(generation) });
        if (open.incidentId && open.openedAt && Date.now() - timestampDate(open.openedAt).getTime() > override.window_hours * 3_600_000) {
          generation = options?.dryRun ? generation + 1 : await store.moveOn(org.id, identity, generation);
        }
      }
      // Recoveries and other notices follow the current generation: they belong to what is open now.
      if (generation > 0) alert.attachIdentity = `${identity}#g${generation}`;
    },
  };
}

/** Put, list and delete an organization's grouping overrides. */
export function createGroupingHandlers(deps: {
  store: GroupingStore | undefined;
  /** The relay to poke after a change's audit record. */
  outbox: Pick<Outbox, "poke"> | undefined;
  clients: Clients;
  /** Every replica hears of a change here before it is answered (GROUPING_OVERRIDES_CHANGED). */
  broadcast: Broadcast;
}): Pick<ServiceImpl<typeof IntakeService>, "putGroupingOverride" | "listGroupingOverrides" | "deleteGroupingOverride"> {
  const { clients, broadcast } = deps;
  function need<T>(value: T | undefined): T {
    if (value === undefined) throw new NotFoundError("grouping overrides are not available in this process");
    return value;
  }
  return {
    async putGroupingOverride(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const source = req.source.trim();
      if (!isSourceBadge(source)) throw new InvalidArgumentError("source: a source badge (metrics-monitor, alert-router, ...) or a custom source's name");
      const attachKey = req.attachKey.trim();
      if (attachKey) {
        try {
          compileAttachKey(attachKey);
        } catch (err) {
          throw new InvalidArgumentError((err as Error).message.replace("rules[0].attachKey", "attachKey"));
        }
      }
      if (req.windowHours > MAX_WINDOW_HOURS) throw new InvalidArgumentError(`windowHours: at most ${MAX_WINDOW_HOURS}`);
      if (!attachKey && req.windowHours === 0) throw new InvalidArgumentError("set attachKey, windowHours or both (to remove an override, DELETE it)");
      const store = need(deps.store);
      const outbox = need(deps.outbox);
      await store.put(
        principal.orgId,
        { source, attachKey, windowHours: req.windowHours },
        { orgId: principal.orgId, kind: "grouping_override.set", actor: principal.email, data: { source, attachKey, windowHours: req.windowHours } },
      );
      outbox.poke();
      await broadcast.publish(GROUPING_OVERRIDES_CHANGED, principal.orgId);
      return create(GroupingOverrideSchema, { source, attachKey, windowHours: req.windowHours });
    },

    async listGroupingOverrides(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const rows = await need(deps.store).list(principal.orgId);
      return create(ListGroupingOverridesResponseSchema, {
        overrides: rows.map((row) => ({ source: row.source, attachKey: row.attach_key, windowHours: row.window_hours })),
      });
    },

    async deleteGroupingOverride(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const store = need(deps.store);
      const outbox = need(deps.outbox);
      const deleted = await store.delete(principal.orgId, req.source, {
        orgId: principal.orgId,
        kind: "grouping_override.deleted",
        actor: principal.email,
        data: { source: req.source },
      });
      outbox.poke();
      if (!deleted) throw new NotFoundError("no grouping override for that source");
      await broadcast.publish(GROUPING_OVERRIDES_CHANGED, principal.orgId);
      return {};
    },
  };
}
