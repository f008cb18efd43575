import type { JsonObject } from "@bufbuild/protobuf";
import { encodeCursor, pageOf, pageRequest } from "../runtime/data/page-cursor.js";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import type { Principal } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { AuditRecord } from "../runtime/transport/events.js";
import { AlreadyExistsError, FailedPreconditionError, InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import type { Outbox } from "../runtime/data/outbox.js";
import type { SecretBox } from "../runtime/credentials/secret-box.js";
import { newOrgPingKey, newPingKey, openPingKey } from "./ping/ping-key.js";
import { checkGrace, checkInterval, checkMaxRun, checkMinRun, checkMisses, checkName, checkRunLimits } from "../domain/heartbeat-rules.js";
import { cadenceData, toHeartbeat } from "./heartbeat-shape.js";
import { checkSchedule, checkTimezone, expectedAfter, type CheckedSchedule } from "../domain/schedule.js";
import { type Expectation, type HeartbeatRow, type HeartbeatStore, OrganizationFullError, PAUSED_DEADLINE } from "./store.js";

export const AUDIT_KINDS = {
  registered: "heartbeat.registered",
  updated: "heartbeat.updated",
  deleted: "heartbeat.deleted",
  pingKeyRotated: "heartbeat.ping_key_rotated",
  orgPingKeyIssued: "heartbeat.org_ping_key_issued",
} as const;

/** What the ping URLs are made from: the secrets key that seals the keys, and the public address. */
export interface PingUrls {
  box(): SecretBox;
  publicUrl(): string;
}

function notFound(name: string): NotFoundError {
  return new NotFoundError(`no heartbeat named "${name}"`);
}

/**
 * The deadline: the last of the expected pings after `since` that may be missed in a row (the
 * next one when a single miss alerts), plus grace.
 */
export function deadlineAfter(since: Date, kind: Expectation, graceSeconds: number): Date {
  return new Date(expectedAfter(since, kind, kind.misses).getTime() + graceSeconds * 1000);
}

function auditData(row: HeartbeatRow): JsonObject {
  const data: JsonObject = { name: row.name, graceSeconds: row.grace_seconds, ...cadenceData(row) };
  if (row.max_run_seconds) data.maxRunSeconds = row.max_run_seconds;
  if (row.min_run_seconds) data.minRunSeconds = row.min_run_seconds;
  if (row.alert_after_misses > 1) data.alertAfterMisses = row.alert_after_misses;
  if (row.paused_at) data.paused = true;
  return data;
}

/** What a heartbeat registered by its first ping (`?create=1`) expects: Healthchecks' defaults. */
export const PROVISIONED = { interval: 86_400, grace: 3_600 } as const;

/**
 * The most heartbeats an organization may have for its ping key to create one more (`?create=1`):
 * whoever holds the key could otherwise create them without end, each one swept and listed.
 * People registering through the API are not counted against it.
 */
export const HEARTBEATS_PER_ORG = 1000;

/**
 * Registers `name` for a ping by the organization's ping key with `?create=1`, audited as done by
 * that key; false when it exists already (a concurrent first ping registered it).
 */
export function createProvisioner(deps: { store: HeartbeatStore; pingUrls: PingUrls; outbox: Pick<Outbox, "poke"> }) {
  return async (org: { id: string; slug: string }, name: string): Promise<boolean> => {
    const expectation = { interval: PROVISIONED.interval, schedule: null, timezone: null, misses: 1 };
    const row = await deps.store
      .register(
        {
          orgId: org.id,
          orgSlug: org.slug,
          name,
          ...expectation,
          gapSeconds: null,
          grace: PROVISIONED.grace,
          maxRun: null,
          minRun: null,
          pingKey: newPingKey(deps.pingUrls.box(), org.id, name),
        },
        (now) => deadlineAfter(now, expectation, PROVISIONED.grace),
        (inserted) => ({ orgId: org.id, kind: AUDIT_KINDS.registered, actor: "organization ping key (create=1)", data: auditData(inserted) }),
        HEARTBEATS_PER_ORG,
      )
      .catch((err: unknown) => {
        if (err instanceof OrganizationFullError)
          throw new FailedPreconditionError(
            `this organization has ${err.atMost} heartbeats, the most its ping key creates; delete heartbeats it no longer needs, or have an admin register this one`,
          );
        throw err;
      });
    if (row) deps.outbox.poke();
    return row !== undefined;
  };
}

/** Register, list, read, update and delete: the management routes, for people. */
export function createRegistryHandlers(deps: {
  store: HeartbeatStore;
  clients: Clients;
  outbox: Pick<Outbox, "poke">;
  pingUrls: PingUrls;
}): Pick<
  ServiceImpl<typeof HeartbeatsService>,
  "registerHeartbeat" | "listHeartbeats" | "getHeartbeat" | "updateHeartbeat" | "deleteHeartbeat" | "rotateHeartbeatPingKey" | "issueOrgPingKey"
> {
  const { store, clients, outbox, pingUrls } = deps;

  /** The heartbeat as the API answers it, with its ping URL (empty while it has no key yet). */
  function shape(row: HeartbeatRow) {
    let key: string | undefined;
    try {
      key = openPingKey(pingUrls.box(), row);
    } catch {
      // Sealed under a secrets key no longer configured: the heartbeat still reads, without its
      // URL, and a rotation gives it a new key.
      key = undefined;
    }
    return toHeartbeat(row, key ? `${pingUrls.publicUrl()}/ping/${key}` : "");
  }

  function auditBy(principal: Principal, kind: string, data: JsonObject): AuditRecord {
    return { orgId: principal.orgId, kind, actor: principal.email, data };
  }

  return {
    async registerHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      checkName(req.name);
      let interval: number | null = null;
      let schedule: CheckedSchedule | null = null;
      if (req.schedule !== undefined) {
        if (req.expectedIntervalSeconds) throw new InvalidArgumentError("send either expectedIntervalSeconds or schedule, not both");
        schedule = checkSchedule(req.schedule, req.timezone);
      } else {
        if (req.timezone !== undefined) throw new InvalidArgumentError("timezone goes with a schedule");
        interval = checkInterval(req.expectedIntervalSeconds);
      }
      const grace = checkGrace(req.graceSeconds);
      const maxRun = req.maxRunSeconds === undefined ? null : checkMaxRun(req.maxRunSeconds);
      const minRun = req.minRunSeconds === undefined ? null : checkMinRun(req.minRunSeconds);
      checkRunLimits(minRun, maxRun);
      const misses = req.alertAfterMisses === undefined ? 1 : checkMisses(req.alertAfterMisses);
      const expectation = { interval, schedule: schedule?.schedule ?? null, timezone: schedule?.timezone ?? null, misses };
      const row = await store.register(
        {
          orgId: principal.orgId,
          orgSlug: principal.orgSlug,
          name: req.name,
          ...expectation,
          gapSeconds: schedule?.gapSeconds ?? null,
          grace,
          maxRun,
          minRun,
          pingKey: newPingKey(pingUrls.box(), principal.orgId, req.name),
        },
        (now) => deadlineAfter(now, expectation, grace),
        (inserted) => auditBy(principal, AUDIT_KINDS.registered, auditData(inserted)),
      );
      if (!row) throw new AlreadyExistsError(`a heartbeat named "${req.name}" already exists`);
      outbox.poke();
      return shape(row);
    },

    async listHeartbeats(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      // Paged by name, 1000 by default: an organization with a very large number of heartbeats
      // gets them a page at a time rather than as one reply over the internal message limit.
      const { limit, after } = pageRequest(req, "h", (v) => v.length > 0 && v.length <= 255, { fallback: 1000, max: 10_000 });
      const rows = await store.list(principal.orgId, after, limit + 1);
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("h", last.name));
      return { heartbeats: page.map(shape), ...(nextCursor ? { nextCursor } : {}) };
    },

    async getHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const row = await store.get(principal.orgId, req.name);
      if (!row) throw notFound(req.name);
      return shape(row);
    },

    async updateHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      // Over HTTP the path fills `heartbeat` and the body may carry `name`; a Connect caller may
      // name the heartbeat with either.
      const target = req.heartbeat || req.name;
      if (req.heartbeat && req.name && req.name !== req.heartbeat) {
        throw new InvalidArgumentError(
          `a heartbeat cannot be renamed (its name is fixed once registered): to use the name "${req.name}", delete "${req.heartbeat}" and register "${req.name}"`,
        );
      }
      if (
        req.expectedIntervalSeconds === undefined &&
        req.graceSeconds === undefined &&
        req.schedule === undefined &&
        req.timezone === undefined &&
        req.maxRunSeconds === undefined &&
        req.minRunSeconds === undefined &&
        req.alertAfterMisses === undefined &&
        req.paused === undefined
      ) {
        throw new InvalidArgumentError(
          "nothing to update: send one or more of expectedIntervalSeconds, schedule, timezone, graceSeconds, maxRunSeconds, minRunSeconds, alertAfterMisses, paused",
        );
      }
      if (req.expectedIntervalSeconds !== undefined && req.schedule !== undefined) {
        throw new InvalidArgumentError("send either expectedIntervalSeconds or schedule, not both");
      }
      const interval = req.expectedIntervalSeconds === undefined ? null : checkInterval(req.expectedIntervalSeconds);
      const grace = req.graceSeconds === undefined ? null : checkGrace(req.graceSeconds);
      // 0 removes the limit.
      const maxRun = req.maxRunSeconds === undefined || req.maxRunSeconds === 0 ? null : checkMaxRun(req.maxRunSeconds);
      const minRun = req.minRunSeconds === undefined || req.minRunSeconds === 0 ? null : checkMinRun(req.minRunSeconds);
      const misses = req.alertAfterMisses === undefined ? null : checkMisses(req.alertAfterMisses);
      if (req.timezone !== undefined) checkTimezone(req.timezone);
      const row = await store.update(
        principal.orgId,
        target,
        (current) => {
          const newMisses = misses ?? current.misses;
          let next: Expectation = { interval: current.interval, schedule: current.schedule, timezone: current.timezone, misses: newMisses };
          let gap: number | null = null;
          if (interval !== null) next = { interval, schedule: null, timezone: null, misses: newMisses };
          else if (req.schedule !== undefined || (req.timezone !== undefined && current.schedule)) {
            const checked = checkSchedule(req.schedule ?? current.schedule!, req.timezone ?? current.timezone ?? undefined);
            next = { interval: null, schedule: checked.schedule, timezone: checked.timezone, misses: newMisses };
            gap = checked.gapSeconds;
          } else if (req.timezone !== undefined) {
            throw new InvalidArgumentError("timezone goes with a schedule");
          }
          const newGrace = grace ?? current.grace;
          // The deadline moves with the new expectation and grace. A silence in progress stays one
          // silence: only a ping ends it, so a longer interval never opens a second incident.
          // Paused, there is none; resumed, the expected pings count from now.
          const paused = req.paused ?? current.paused;
          const deadline = paused ? PAUSED_DEADLINE : deadlineAfter(req.paused === false && current.paused ? new Date() : current.since, next, newGrace);
          // The limits as they will be, checked together (a new minimum against the kept maximum).
          checkRunLimits(req.minRunSeconds === undefined ? current.minRun : minRun, req.maxRunSeconds === undefined ? current.maxRun : maxRun);
          return {
            ...next,
            gapSeconds: gap,
            grace: newGrace,
            maxRun: req.maxRunSeconds === undefined ? undefined : maxRun,
            minRun: req.minRunSeconds === undefined ? undefined : minRun,
            deadline,
            paused: req.paused,
          };
        },
        (updated) => auditBy(principal, AUDIT_KINDS.updated, auditData(updated)),
      );
      if (!row) throw notFound(target);
      outbox.poke();
      return shape(row);
    },

    async rotateHeartbeatPingKey(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      // The audit names the heartbeat, never a key.
      const row = await store.rotatePingKey(
        principal.orgId,
        req.name,
        newPingKey(pingUrls.box(), principal.orgId, req.name),
        auditBy(principal, AUDIT_KINDS.pingKeyRotated, { name: req.name }),
      );
      if (!row) throw notFound(req.name);
      outbox.poke();
      return shape(row);
    },

    async issueOrgPingKey(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const { key, hash } = newOrgPingKey();
      await store.issueOrgPingKey(
        principal.orgId,
        principal.orgSlug,
        hash,
        req.allowCreate,
        auditBy(principal, AUDIT_KINDS.orgPingKeyIssued, { allowCreate: req.allowCreate }),
      );
      outbox.poke();
      return { pingKey: key, pingUrlBase: `${pingUrls.publicUrl()}/ping/${key}`, allowCreate: req.allowCreate };
    },

    async deleteHeartbeat(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const deleted = await store.delete(principal.orgId, req.name, auditBy(principal, AUDIT_KINDS.deleted, { name: req.name }));
      if (!deleted) throw notFound(req.name);
      outbox.poke();
      return {};
    },
  };
}
