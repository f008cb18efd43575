import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { RecordResponse } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { Clients } from "../runtime/transport/clients.js";
import { DomainError, RateLimitedError, UnavailableError, UnprocessablePayloadError } from "../runtime/errors.js";
import { LARGE_BODY_BYTES, type LargeBodies } from "./custom-sources/large-bodies.js";
import type { LargeBodyBudget } from "./large-body-budget.js";
import { parseTriggerBody } from "./request-body.js";
import { ShareExceeded, type FairShares } from "./fair-shares.js";
import type { Logger } from "../runtime/observability/logger.js";
import { deliveries, deliveriesRefused } from "../runtime/observability/metrics.js";
import { detachedFromCancellation, REQUEST_ID_HEADER } from "../runtime/http/request-context.js";
import { annotate } from "../runtime/observability/tracing.js";
import { noteForegroundWork } from "../runtime/concurrency/background-yield.js";
import { recordAlone, type RecordCall } from "./record-groups.js";
import { bodyDigestOf, retryKeyOf, reusedKeyMessage, type TriggerRoute } from "./retry-keys.js";
import { RetryKeyReusedError, type RetryRecognition } from "./retry-recognition.js";
import { PayloadError, type AlertInit, type MappedDelivery, type TriggerSource } from "./sources/index.js";
import type { Correlation } from "./correlation/correlation.js";
import type { Grouping } from "./grouping/grouping.js";
import type { IntakeStore } from "./store.js";

/**
 * A delivery as mapped, or the mapping itself when it may be costly (a custom source's rules): then
 * it runs within the organization's share, so an organization's expensive mapping spends its own
 * share and is never run for a delivery the share refuses.
 */
export type Mapping = MappedDelivery | (() => MappedDelivery | Promise<MappedDelivery>);

/**
 * The delivery path every receiver shares: retry recognition, the incident core, the answer,
 * metrics. A receiver authenticates and reads its body, then calls `deliver` with the mapped
 * delivery or its mapping.
 */
export interface DeliveryPath {
  /**
   * Charges a body of `bytes` to its organization's budget of large bodies, once its credential
   * is checked and before it is parsed: past the budget it waits its turn, and past the wait it is
   * refused with the route's "try again" answer (large-body-budget.ts).
   */
  admitBody(orgId: string, route: TriggerRoute, bytes: number, context: HandlerContext): Promise<void>;
  /**
   * A JSON route's body, admitted (admitBody) and then read with parseTriggerBody's answers: one
   * over LARGE_BODY_BYTES on a large-body thread in the organization's turn, so decoding it never
   * holds the event loop; a smaller one on the loop.
   */
  readJson(orgId: string, route: TriggerRoute, req: { body: Uint8Array; contentType: string }, context: HandlerContext): Promise<unknown>;
  deliver(org: Organization, route: TriggerRoute, source: string, body: unknown, mapping: Mapping, context: HandlerContext): Promise<TriggerAnswer>;
}

/** The answer of a delivery: the fields of `TriggerResponse`, as plain JSON a retry gets back. */
export type TriggerAnswer = {
  outcome: string;
  incidentId?: string;
  entity?: { kind: string; id: string };
  proposedSeverity?: string;
  workspaceUrl?: string;
  reason?: string;
};

/** Maps a recognized body; a body the mapping refuses is the sender's fault (422). */
export function mapOrRefuse(source: TriggerSource, body: unknown): MappedDelivery {
  try {
    return source.map(body, { receivedAt: new Date() });
  } catch (err) {
    if (err instanceof PayloadError) throw new UnprocessablePayloadError(err.message);
    throw err;
  }
}

/** The delivery path over the incident core's client, intake's store and its retry recognition. */
export function createDeliveryPath(deps: {
  clients: Clients;
  store: IntakeStore;
  logger: Logger;
  retries: RetryRecognition;
  /** The organization's grouping overrides; none: every source groups as it does by default. */
  grouping?: Grouping | undefined;
  /** The organization's correlation across sources; none: nothing is correlated. */
  correlation?: Correlation | undefined;
  /** Each organization's share of this process's deliveries in flight; none: no limit. */
  shares?: FairShares | undefined;
  /** How deliveries reach the incident core; by default one Record call each. */
  recordCall?: RecordCall | undefined;
  /** Each organization's budget of bodies over 64 KiB; none: no budget. */
  largeBodyBudget?: LargeBodyBudget | undefined;
  /** Worker threads that read large bodies (INTAKE_LARGE_BODY_WORKERS); none: read on the event loop. */
  largeBodies?: LargeBodies | undefined;
}): DeliveryPath {
  const { clients, store, logger, retries, grouping, correlation, shares } = deps;
  const recordCall = deps.recordCall ?? recordAlone(clients.incidents);

  /** Hands the alert to the incident core; a failure there is a 503 the sender may retry. */
  async function record(org: Organization, alert: AlertInit, context: HandlerContext, retryKey: string, correlationGroupId = ""): Promise<RecordResponse> {
    try {
      // Not canceled when the sender hangs up (only ended by the deadline): the answer is kept for
      // the sender's retry, which would otherwise do the work again.
      return await detachedFromCancellation(() =>
        recordCall(
          { orgId: org.id, orgSlug: org.slug, alert, retryKey, ...(correlationGroupId ? { correlationGroupId } : {}) },
          context.requestHeader.get(REQUEST_ID_HEADER) ?? "",
        ),
      );
    } catch (err) {
      const code = ConnectError.from(err).code;
      if (code === Code.InvalidArgument) throw err;
      logger.warn({ err: String(err) }, "the incident core did not answer");
      throw new UnavailableError("unavailable");
    }
  }

  /** A held answer naming an incident a person has since resolved or archived no longer stands. */
  async function stillNamesOpenIncident(org: Organization, held: TriggerAnswer): Promise<boolean> {
    if (!held.incidentId) return true;
    try {
      const { state } = await clients.incidents.incidentState({ orgId: org.id, incidentId: held.incidentId });
      return state === "open";
    } catch (err) {
      // Unsure: answering as before can never double an incident.
      logger.warn({ err: String(err) }, "could not read an incident's state for a retried delivery");
      return true;
    }
  }

  /**
   * The delivery to the incident core. `retryKey` goes with it: for a delivery without an attach
   * identity (the error tracker's) the core keeps it with the incident it opens, in the same
   * statement, so a retry after this process died between the core's commit and storing the
   * answer finds that incident instead of opening a second one.
   */
  async function deliverMapped(org: Organization, body: unknown, mapped: MappedDelivery, context: HandlerContext, retryKey = ""): Promise<TriggerAnswer> {
    if (mapped.outcome === "ignored") return { outcome: "ignored", reason: mapped.reason };
    if (mapped.outcome === "subscription-notice") {
      // Never fetched: an operator confirms with the token (see README).
      await store.audit(org.id, "trigger.sns_subscription_notice", {
        messageType: mapped.messageType,
        topicArn: mapped.topicArn,
        ...(mapped.subscribeUrl ? { subscribeUrl: mapped.subscribeUrl } : {}),
        ...(mapped.token ? { token: mapped.token } : {}),
      });
      return { outcome: "ignored", reason: mapped.reason };
    }
    if (grouping) {
      try {
        await grouping.apply(org, mapped.alert, body);
      } catch (err) {
        // A process too busy to read the key refuses the delivery for now (Retry-After).
        if (err instanceof ShareExceeded) throw err;
        // The override is the organization's preference; losing it for one delivery beats losing the delivery.
        logger.warn({ err: String(err) }, "could not apply a grouping override");
      }
    }
    // Unlike a grouping override, a correlation that cannot be placed fails the delivery (503, which
    // the sender retries): going on without it would open a second incident in attach mode.
    const correlated = correlation ? await correlation.apply(org, mapped.alert) : {};
    const result = await record(org, mapped.alert, context, retryKey, correlated.groupId);
    return answerOf(result, mapped.alert);
  }

  /**
   * Delivers once per retry key: a sender's retry, at the same time or up to a day later, gets
   * the first delivery's answer instead of opening or recording again.
   */
  async function deliverOnce(org: Organization, route: TriggerRoute, body: unknown, mapped: MappedDelivery, context: HandlerContext): Promise<TriggerAnswer> {
    if (mapped.outcome === "ignored") return { outcome: "ignored", reason: mapped.reason };
    const key = retryKeyOf(route, body, mapped, context.requestHeader);
    if (!key) return deliverMapped(org, body, mapped, context);
    try {
      return await retries.once(org.id, key, () => deliverMapped(org, body, mapped, context, key), {
        signal: context.signal,
        stillValid: (held) => stillNamesOpenIncident(org, held),
        bodyDigest: bodyDigestOf(body, context.requestHeader),
      });
    } catch (err) {
      if (err instanceof RetryKeyReusedError) throw new UnprocessablePayloadError(reusedKeyMessage(context.requestHeader));
      throw err;
    }
  }

  /**
   * Within the organization's share, the mapping too: past it, the answer its senders retry (see
   * shareRefusal). A delivery already mapped as ignored takes no share.
   */
  async function deliverShared(org: Organization, route: TriggerRoute, body: unknown, mapping: Mapping, context: HandlerContext): Promise<TriggerAnswer> {
    const mapped = async () => (typeof mapping === "function" ? mapping() : mapping);
    const remaining = context.timeoutMs();
    try {
      // A large body's work may still be refused for this process's load (ShareExceeded) here too.
      if (!shares || (typeof mapping !== "function" && mapping.outcome === "ignored")) return await deliverOnce(org, route, body, await mapped(), context);
      return await shares.run(org.id, async () => deliverOnce(org, route, body, await mapped(), context), {
        // Never waits past the caller's deadline: a refusal in time beats an answer too late.
        deadline: remaining === undefined ? undefined : Date.now() + remaining,
        signal: context.signal,
      });
    } catch (err) {
      if (err instanceof ShareExceeded) throw refused(route, err);
      throw err;
    }
  }

  /** A refusal before any work: counted by route and reason, answered as the route's senders retry. */
  const refused = (route: TriggerRoute, err: ShareExceeded) => {
    deliveriesRefused.inc({ source: route.startsWith("custom:") ? "custom" : route, reason: err.refusal });
    return shareRefusal(route, err);
  };

  async function admitBody(orgId: string, route: TriggerRoute, bytes: number, context: HandlerContext): Promise<void> {
    try {
      await deps.largeBodyBudget?.charge(orgId, bytes, { deadlineMs: context.timeoutMs(), signal: context.signal });
    } catch (err) {
      if (err instanceof ShareExceeded) throw refused(route, err);
      throw err;
    }
  }

  return {
    admitBody,
    async readJson(orgId, route, req, context) {
      await admitBody(orgId, route, req.body.byteLength, context);
      try {
        if (deps.largeBodies && req.body.byteLength > LARGE_BODY_BYTES) return await deps.largeBodies.parse(orgId, req.body, req.contentType);
      } catch (err) {
        if (err instanceof ShareExceeded) throw refused(route, err);
        throw err;
      }
      return parseTriggerBody(req.body, req.contentType, { allowForm: false });
    },
    async deliver(org, route, source, body, mapping, context) {
      noteForegroundWork();
      const answered = await deliverShared(org, route, body, mapping, context);
      deliveries.inc({ source, outcome: answered.outcome });
      annotate({ "warroom.outcome": answered.outcome, "warroom.source": source, "warroom.org_id": org.id });
      return answered;
    },
  };
}

/**
 * The incident core's reason for a recovery without an event identifier that repeats one already
 * recorded since the incident's latest alert (a PagerDuty resolve or an Opsgenie close sent again).
 */
export const RECOVERY_HELD = "a recovery is already recorded since the incident's latest alert";

/** The incident core's answer as the sender gets it; only the fields that are set. */
function answerOf(result: RecordResponse, alert: AlertInit): TriggerAnswer {
  const answer: TriggerAnswer = { outcome: result.outcome };
  const incident = result.incident;
  if (incident && (result.outcome === "opened" || result.outcome === "attached" || result.outcome === "recorded")) {
    answer.incidentId = incident.id;
    if (incident.entity) answer.entity = { kind: incident.entity.kind, id: incident.entity.id };
    if (incident.severity) answer.proposedSeverity = incident.severity;
    if (incident.workspaceUrl) answer.workspaceUrl = incident.workspaceUrl;
  } else {
    if (alert.entity) answer.entity = { kind: alert.entity.kind ?? "", id: alert.entity.id ?? "" };
    if (alert.severity) answer.proposedSeverity = alert.severity;
  }
  const reason =
    result.outcome === "suppressed"
      ? "an active maintenance window covers this delivery"
      : result.outcome === "ignored"
        ? result.reason === RECOVERY_HELD
          ? RECOVERY_HELD
          : ignoredReason(alert)
        : undefined;
  if (reason) answer.reason = reason;
  return answer;
}

function ignoredReason(alert: AlertInit): string {
  return alert.kind === "no_data" ? "no open incident for this no-data notice, or already recorded" : "no open incident for this recovery, or already recorded";
}

/**
 * The answer to a delivery past its organization's share (or an overloaded process), in the status
 * its senders retry: 429 where the sender's API names 429 as "slow down and send again" (PagerDuty
 * Events v2, Opsgenie, custom sources, whose senders are told so in the README), 503 where some
 * senders retry only 5xx (the shared trigger route's monitors, the alert router, chat workflows).
 * Both carry Retry-After. The table is in services/intake/README.md.
 */
export function shareRefusal(route: TriggerRoute, err: ShareExceeded): DomainError {
  const what = {
    share: "This organization has more deliveries in flight than its share of this server",
    overload: "This server has more deliveries in flight than it can take",
    "large-bodies":
      "This organization's bodies over 64 KiB are queued further ahead than this server waits, at its budget of INTAKE_LARGE_BODY_BYTES_PER_SECOND",
  }[err.refusal];
  const message = `${what}; send it again after ${err.retryAfterSeconds} s (Retry-After)`;
  if (route === "pagerduty" || route === "opsgenie" || route.startsWith("custom:")) return new RateLimitedError(message, err.retryAfterSeconds);
  return new DomainError(Code.Unavailable, message, { "retry-after": String(err.retryAfterSeconds) });
}
