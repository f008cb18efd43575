import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import type { RecordResponse } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { IntakeService, type DeliverChatRequest, type DeliverRequest } from "../../gen/warroom/intake/v1/intake_pb.js";
import { bearerToken } from "../runtime/auth.js";
import { recordAudit } from "../runtime/events.js";
import { createIngestTokenResolver } from "../runtime/ingest-token-cache.js";
import { deliveries } from "../runtime/metrics.js";
import { annotate } from "../runtime/tracing.js";
import { detachedFromCancellation } from "../runtime/request-context.js";
import { RateLimitedError, UnauthenticatedError, UnavailableError, UnprocessablePayloadError } from "../runtime/errors.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { createChatRateLimit } from "./chat-rate-limit.js";
import { createDropinReceivers } from "./dropin-receivers.js";
import { createReceiverFailures } from "./receiver-failures.js";
import { migrations } from "./migrations.js";
import { InvalidUtf8Error, parseTriggerBody, UNRECOGNIZED } from "./request-body.js";
import { retryKeyOf, type TriggerRoute } from "./retry-keys.js";
import { createRetryRecognition } from "./retry-recognition.js";
import { alertRouterSource, chatSource, PayloadError, recognizeTrigger, type AlertInit, type MappedDelivery, type TriggerSource } from "./sources/index.js";

/** The spec's limit on the chat receiver: authenticated calls per minute per organization. */
export const CHAT_CALLS_PER_MINUTE = 60;
/** Failed authentications a client address may make per minute on a chat route or the alert-router receiver. */
export const RECEIVER_FAILURES_PER_MINUTE = 10;

interface Organization {
  id: string;
  slug: string;
}

/**
 * The intake service module: the trigger routes and drop-in receivers, their authentication and
 * limits, and a timer that forgets expired retry keys.
 */
export function createIntakeService(ctx: ServiceContext): ServiceModule {
  const { clients, sql, outbox, logger } = ctx;
  const chatLimit = createChatRateLimit(sql, CHAT_CALLS_PER_MINUTE);
  const failures = createReceiverFailures(sql, RECEIVER_FAILURES_PER_MINUTE);

  /**
   * Resolves a receiver secret; an address that failed too often on this scope gets 429 first,
   * and each failure is counted for it.
   */
  async function resolveSecret(scope: string, kind: "chat" | "alertrouter", orgSlug: string, secret: string, context: HandlerContext) {
    const address = context.requestHeader.get("x-forwarded-for") ?? "";
    const allowed = await failures.check(scope, address);
    if (!allowed.allowed) throw new RateLimitedError("too many failed attempts from this address; try again later", allowed.retryAfterSeconds);
    try {
      // The secret travels in its header, never in the message body.
      return await clients.identity.resolveReceiverSecret(
        { kind, orgSlug },
        { signal: context.signal, headers: { ...forwardedFor(context), [`x-service-${kind}-secret`]: secret } },
      );
    } catch (err) {
      if (ConnectError.from(err).code === Code.Unauthenticated) await failures.record(scope, address);
      throw err;
    }
  }
  const ingestTokens = createIngestTokenResolver({ clients, broadcast: ctx.broadcast });
  const retries = createRetryRecognition(sql, logger);
  let forgetTimer: NodeJS.Timeout | undefined;

  function mapOrRefuse(source: TriggerSource, body: unknown): MappedDelivery {
    try {
      return source.map(body, { receivedAt: new Date() });
    } catch (err) {
      if (err instanceof PayloadError) throw new UnprocessablePayloadError(err.message);
      throw err;
    }
  }

  /** Hands the alert to the incident core; a failure there is a 503 the sender may retry. */
  async function record(org: Organization, alert: AlertInit, context: HandlerContext): Promise<RecordResponse> {
    try {
      // Not canceled when the sender hangs up (only ended by the deadline): the answer is kept for
      // the sender's retry, which would otherwise do the work again.
      return await detachedFromCancellation(() =>
        clients.incidents.record({ orgId: org.id, orgSlug: org.slug, alert }, { headers: { "x-request-id": context.requestHeader.get("x-request-id") ?? "" } }),
      );
    } catch (err) {
      const code = ConnectError.from(err).code;
      if (code === Code.InvalidArgument) throw err;
      logger.warn({ err: String(err) }, "the incident core did not answer");
      throw new UnavailableError("unavailable");
    }
  }

  function answer(result: RecordResponse, alert: AlertInit) {
    const incident = result.incident;
    const withIncident = incident && (result.outcome === "opened" || result.outcome === "attached" || result.outcome === "recorded");
    return {
      outcome: result.outcome,
      incidentId: withIncident ? incident.id : undefined,
      entity: withIncident ? incident.entity : alert.entity,
      proposedSeverity: withIncident ? incident.severity : (alert.severity as string | undefined),
      workspaceUrl: withIncident ? incident.workspaceUrl : undefined,
      reason:
        result.outcome === "suppressed" ? "an active maintenance window covers this delivery" : result.outcome === "ignored" ? ignoredReason(alert) : undefined,
    };
  }

  function ignoredReason(alert: AlertInit): string {
    return alert.kind === "no_data"
      ? "no open incident for this no-data notice, or already recorded"
      : "no open incident for this recovery, or already recorded";
  }

  async function audit(org: Organization, kind: string, data: JsonObject): Promise<void> {
    await sql.begin((tx) => recordAudit(outbox, tx, { orgId: org.id, kind, actor: "trigger", data }));
    outbox.poke();
  }

  /**
   * Delivers once per retry key: a sender's retry, at the same time or up to a day later, gets
   * the first delivery's answer instead of opening or recording again.
   */
  async function deliver(org: Organization, route: TriggerRoute, source: string, body: unknown, mapped: MappedDelivery, context: HandlerContext) {
    const answered = await deliverOnce(org, route, body, mapped, context);
    deliveries.inc({ source, outcome: answered.outcome });
    annotate({ "warroom.outcome": answered.outcome, "warroom.source": source, "warroom.org_id": org.id });
    return answered;
  }

  async function deliverOnce(org: Organization, route: TriggerRoute, body: unknown, mapped: MappedDelivery, context: HandlerContext) {
    if (mapped.outcome === "ignored") return { outcome: "ignored", reason: mapped.reason };
    const key = retryKeyOf(route, body, mapped, context.requestHeader);
    if (!key) return deliverMapped(org, mapped, context);
    return retries.once(org.id, key, async () => heldAnswer(await deliverMapped(org, mapped, context)), {
      signal: context.signal,
      stillValid: (held) => stillNamesOpenIncident(org, held),
    });
  }

  /** A held answer naming an incident a person has since resolved or archived no longer stands. */
  async function stillNamesOpenIncident(org: Organization, held: HeldAnswer): Promise<boolean> {
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

  async function deliverMapped(org: Organization, mapped: MappedDelivery, context: HandlerContext) {
    if (mapped.outcome === "ignored") return { outcome: "ignored", reason: mapped.reason };
    if (mapped.outcome === "subscription-notice") {
      // Never fetched: an operator confirms with the token (see README).
      await audit(org, "trigger.sns_subscription_notice", {
        messageType: mapped.messageType,
        topicArn: mapped.topicArn,
        ...(mapped.subscribeUrl ? { subscribeUrl: mapped.subscribeUrl } : {}),
        ...(mapped.token ? { token: mapped.token } : {}),
      });
      return { outcome: "ignored", reason: mapped.reason };
    }
    const result = await record(org, mapped.alert, context);
    return answer(result, mapped.alert);
  }

  const dropin = createDropinReceivers({ sql, clients, ingestTokens, deliver, audit });

  const impl = {
    ...dropin,
    async deliver(req: DeliverRequest, context: HandlerContext) {
      const authorization = context.requestHeader.get("authorization");
      const token = bearerToken(authorization);
      if (!token) throw new UnauthenticatedError("Missing trigger ingest token");
      const org = await ingestTokens.resolve(token, context.signal);
      const body = parseTriggerBody(req.body, req.contentType, { allowForm: false });
      const source = recognizeTrigger(body);
      if (!source) throw new UnprocessablePayloadError(UNRECOGNIZED);
      const mapped = mapOrRefuse(source, body);
      if (mapped.alert?.source === "remote") await requireConnection(org, mapped.alert, context);
      return deliver(org, "shared", source.badge, body, mapped, context);
    },

    async deliverAlertRouter(req: DeliverRequest, context: HandlerContext) {
      const org = await resolveSecret("alertrouter", "alertrouter", "", alertRouterSecret(context), context);
      const body = parseTriggerBody(req.body, req.contentType, { allowForm: false });
      if (!alertRouterSource.recognize(body)) throw new UnprocessablePayloadError(UNRECOGNIZED, "not an alert-router (Alertmanager webhook) notification");
      return deliver(org, "alertrouter", alertRouterSource.badge, body, mapOrRefuse(alertRouterSource, body), context);
    },

    async deliverChat(req: DeliverChatRequest, context: HandlerContext) {
      // Only authenticated calls spend the route's budget: outsiders cannot lock the workflow out.
      const org = await resolveSecret(`chat:${req.orgSlug}`, "chat", req.orgSlug, context.requestHeader.get("x-service-chat-secret") ?? "", context);
      const limit = await chatLimit.take(req.orgSlug);
      if (!limit.allowed) throw new RateLimitedError(`more than ${CHAT_CALLS_PER_MINUTE} calls a minute to this route`, limit.retryAfterSeconds);
      let body: unknown;
      try {
        body = parseTriggerBody(req.body, req.contentType, { allowForm: true });
      } catch (err) {
        if (err instanceof InvalidUtf8Error) throw err;
        return { outcome: "ignored", reason: "the body is neither JSON nor form fields" };
      }
      if (!chatSource.recognize(body)) return { outcome: "ignored", reason: "channel_id is missing" };
      return deliver(org, "chat", chatSource.badge, body, mapOrRefuse(chatSource, body), context);
    },
  };

  async function requireConnection(org: Organization, alert: AlertInit, context: HandlerContext): Promise<void> {
    const connectionId = (alert.data as { connectionId?: string } | undefined)?.connectionId ?? "";
    try {
      await clients.remoteSources.resolveConnection({ orgId: org.id, connectionId }, { signal: context.signal });
    } catch (err) {
      // The remote-source service refuses an unknown connection as an unprocessable payload
      // (InvalidArgument); NotFound is accepted too. Either way the sender's field is at fault.
      const code = ConnectError.from(err).code;
      if (code === Code.NotFound || code === Code.InvalidArgument) {
        throw new UnprocessablePayloadError(`connectionId ${JSON.stringify(connectionId)} is not a remote source of this organization`);
      }
      throw new UnavailableError("unavailable");
    }
  }

  return {
    name: "intake",
    migrations,
    services: [IntakeService],
    register(router: ConnectRouter) {
      router.service(IntakeService, countRefusals(impl) as never);
    },
    async start() {
      const forget = () =>
        retries.forgetExpired().then(
          (count) => count > 0 && logger.debug({ count }, "forgot expired retry keys"),
          (err: unknown) => logger.warn({ err }, "could not forget expired retry keys"),
        );
      forgetTimer = setInterval(forget, FORGET_EVERY_MS);
      forgetTimer.unref();
    },
    async stop() {
      clearInterval(forgetTimer);
    },
  };
}

const REFUSAL_SOURCE: Record<string, string> = {
  deliverChat: "chat",
  deliverAlertRouter: "alert-router",
  enqueuePagerDutyEvent: "pagerduty-events",
  enqueuePagerDutyChange: "pagerduty-events",
  createOpsgenieAlert: "opsgenie",
  closeOpsgenieAlert: "opsgenie",
  acknowledgeOpsgenieAlert: "opsgenie",
};

const FORGET_EVERY_MS = 10 * 60_000;

/** The answer a retry gets back: the first delivery's, as plain JSON. */
type HeldAnswer = {
  outcome: string;
  incidentId?: string;
  entity?: { kind: string; id: string };
  proposedSeverity?: string;
  workspaceUrl?: string;
  reason?: string;
};

function heldAnswer(answer: {
  outcome: string;
  incidentId?: string | undefined;
  entity?: { kind?: string | undefined; id?: string | undefined } | undefined;
  proposedSeverity?: string | undefined;
  workspaceUrl?: string | undefined;
  reason?: string | undefined;
}): HeldAnswer {
  const held: HeldAnswer = { outcome: answer.outcome };
  if (answer.incidentId) held.incidentId = answer.incidentId;
  if (answer.entity) held.entity = { kind: answer.entity.kind ?? "", id: answer.entity.id ?? "" };
  if (answer.proposedSeverity) held.proposedSeverity = answer.proposedSeverity;
  if (answer.workspaceUrl) held.workspaceUrl = answer.workspaceUrl;
  if (answer.reason) held.reason = answer.reason;
  return held;
}

/** A delivery refused before it reached the incident core is counted as `refused`. */
function countRefusals<T extends Record<string, (...args: never[]) => Promise<unknown>>>(handlers: T): T {
  const counted: Record<string, unknown> = {};
  for (const [name, handler] of Object.entries(handlers)) {
    if (name === "getOpsgenieRequestStatus") {
      counted[name] = handler;
      continue;
    }
    const source = REFUSAL_SOURCE[name] ?? "shared";
    counted[name] = async (...args: never[]) => {
      try {
        return await handler(...args);
      } catch (err) {
        deliveries.inc({ source, outcome: "refused" });
        annotate({ "warroom.outcome": "refused", "warroom.source": source });
        throw err;
      }
    };
  }
  return counted as T;
}

/**
 * The alert-router's secret: the `x-service-alertrouter-secret` header, or `Authorization: Bearer`
 * (what Alertmanager before 0.28 can send, through `http_config.authorization`). Either way a
 * wrong or missing one gets the same uniform 401.
 */
function alertRouterSecret(context: HandlerContext): string {
  return context.requestHeader.get("x-service-alertrouter-secret") ?? bearerToken(context.requestHeader.get("authorization")) ?? "";
}

function forwardedFor(context: HandlerContext): Record<string, string> {
  return { "x-forwarded-for": context.requestHeader.get("x-forwarded-for") ?? "" };
}
