import { createHash, randomBytes, randomUUID } from "node:crypto";
import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { Organization } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { DeliverRequest, GetOpsgenieRequestStatusRequest, IntakeService, OpsgenieAlertActionRequest } from "../../gen/warroom/intake/v1/intake_pb.js";
import type { Clients } from "../runtime/transport/clients.js";
import { DomainError, NotFoundError, UnauthenticatedError, UnprocessablePayloadError, unprocessableOf } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import type { IngestTokenResolver } from "../runtime/credentials/ingest-token-cache.js";
import { RECOVERY_HELD, type DeliveryPath, type TriggerAnswer } from "./delivery.js";
import { parseTriggerBody } from "./request-body.js";
import { IDEMPOTENCY_KEY_HEADER } from "./retry-keys.js";
import { storableCut, storableText } from "./sources/text-limits.js";
import type { AlertDelivery } from "./sources/index.js";
import * as opsgenie from "./sources/own-routes/opsgenie.js";
import * as pagerDuty from "./sources/own-routes/pagerduty-events.js";
import type { IntakeStore } from "./store.js";

/**
 * The drop-in receivers: PagerDuty Events API v2 and the Opsgenie Alert API, so a monitor wired
 * to either moves by changing a URL. The bodies are read by the pure mappings in `sources/`; the
 * incident core decides the outcome as for every other source; the answer shapes are the
 * vendors' own and are built in the gateway (`services/gateway/dropin-answers.ts`) from the
 * metadata these errors carry.
 */

/** PagerDuty's 400 `invalid event`, with the list of problems it answers. */
export class PagerDutyInvalidEventError extends DomainError {
  constructor(errors: readonly string[]) {
    super(Code.InvalidArgument, "Event object is invalid", { "x-pagerduty-errors": JSON.stringify(errors) });
  }
}

/** Opsgenie's 422, with its per-field `errors`. */
export class OpsgenieUnprocessableError extends UnprocessablePayloadError {
  constructor(errors: Readonly<Record<string, string>>) {
    super("Request body is not processable. Please check the errors.", undefined, { "x-opsgenie-errors": JSON.stringify(errors) });
  }
}

export const OPSGENIE_ACCEPTED = "Request will be processed";
const PAGERDUTY_PROCESSED = "Event processed";
const PAGERDUTY_CHANGE_PROCESSED = "Change event processed";

/** How long Opsgenie request statuses are kept for `GET /v2/alerts/requests/{id}`. */
export const REQUEST_STATUS_RETENTION_DAYS = 7;

/** What the request status says per outcome, in Opsgenie's words where it has them. */
const STATUS_TEXT: Record<string, Record<string, string>> = {
  Create: { opened: "Created alert", attached: "Alert already exists; attached to its incident", suppressed: "Suppressed by a maintenance window" },
  Close: {
    recorded: "Closed alert; recorded as a recovery, the incident stays open",
    ignored: "Alert does not exist",
    suppressed: "Suppressed by a maintenance window",
  },
  Acknowledge: { recorded: "Acknowledged alert", ignored: "Alert does not exist", suppressed: "Suppressed by a maintenance window" },
};

/**
 * The dedup key of a trigger that carries none: random, as PagerDuty's, except for a retry the
 * sender marks with `Idempotency-Key`, which must get back the key of the first post.
 */
function generatedDedupKey(org: Organization, context: HandlerContext): string {
  const idempotencyKey = context.requestHeader.get(IDEMPOTENCY_KEY_HEADER)?.trim();
  if (!idempotencyKey) return randomBytes(16).toString("hex");
  return createHash("sha256")
    .update(JSON.stringify([org.id, idempotencyKey]))
    .digest("hex")
    .slice(0, 32);
}

function elapsedSeconds(started: number): number {
  return Math.round(performance.now() - started) / 1000;
}

/**
 * The PagerDuty Events v2 (and v1) and Opsgenie Alert API handlers: each maps the vendor's body, delivers it
 * like any trigger, and keeps what the vendor's status reads need.
 */
export function createDropinHandlers(deps: {
  store: IntakeStore;
  clients: Clients;
  ingestTokens: IngestTokenResolver;
  /** The shared delivery path: retry recognition (`Idempotency-Key`), the incident core, metrics. */
  delivery: DeliveryPath;
}): Pick<
  ServiceImpl<typeof IntakeService>,
  | "enqueuePagerDutyEvent"
  | "enqueuePagerDutyV1Event"
  | "enqueuePagerDutyChange"
  | "createOpsgenieAlert"
  | "closeOpsgenieAlert"
  | "acknowledgeOpsgenieAlert"
  | "getOpsgenieRequestStatus"
> {
  const { store, clients, ingestTokens, delivery } = deps;
  const deliver = delivery.deliver;

  function parse(bytes: Uint8Array, contentType: string, refuse: (reason: string) => Error): unknown {
    try {
      return parseTriggerBody(bytes, contentType, { allowForm: false });
    } catch (err) {
      throw refuse(unprocessableOf(err)?.details || "the body is not valid JSON");
    }
  }

  /**
   * PagerDuty keys the organization by `routing_key` (v1: `service_key`); a wrong one is an
   * invalid event there.
   */
  async function pagerDutyOrg(body: unknown, context: HandlerContext, field: "routing_key" | "service_key" = "routing_key"): Promise<Organization> {
    const routingKey = pagerDuty.routingKeyOf(body, field);
    if (!routingKey) throw new PagerDutyInvalidEventError([`'${field}' is missing or blank`]);
    try {
      return await ingestTokens.resolve(routingKey, context.signal);
    } catch (err) {
      if (ConnectError.from(err).code === Code.Unauthenticated) {
        throw new PagerDutyInvalidEventError([field === "routing_key" ? "Invalid routing key" : "Invalid service key"]);
      }
      throw err;
    }
  }

  async function opsgenieOrg(context: HandlerContext): Promise<Organization> {
    const match = /^GenieKey\s+(\S+)\s*$/i.exec(context.requestHeader.get("authorization") ?? "");
    if (!match) throw new UnauthenticatedError("Could not authenticate");
    try {
      return await ingestTokens.resolve(match[1]!, context.signal);
    } catch (err) {
      if (ConnectError.from(err).code === Code.Unauthenticated) throw new UnauthenticatedError("Could not authenticate");
      throw err;
    }
  }

  function mapPagerDuty<T>(map: () => T): T {
    try {
      return map();
    } catch (err) {
      if (err instanceof pagerDuty.PagerDutyEventError) throw new PagerDutyInvalidEventError(err.errors);
      throw err;
    }
  }

  function mapOpsgenie<T>(map: () => T): T {
    try {
      return map();
    } catch (err) {
      if (err instanceof opsgenie.OpsgenieRequestError) throw new OpsgenieUnprocessableError(err.errors);
      throw err;
    }
  }

  /** Stores that a request arrived, before it is acted on: a crash leaves it `processing`. */
  async function beginRequest(org: Organization, action: string, alias: string): Promise<string> {
    const requestId = randomUUID();
    await store.opsgenieRequests.begin({ requestId, orgId: org.id, action, alias: storableCut(alias, 2048) }, REQUEST_STATUS_RETENTION_DAYS);
    return requestId;
  }

  async function finishRequest(requestId: string, action: string, answer: TriggerAnswer, attachIdentity: string | null): Promise<void> {
    // A close that repeats one already recorded did what it asked: the alert is closed.
    const alreadyClosed = action === "Close" && answer.reason === RECOVERY_HELD;
    await store.opsgenieRequests.finish(requestId, {
      outcome: answer.outcome,
      isSuccess: alreadyClosed || answer.outcome === "opened" || answer.outcome === "attached" || answer.outcome === "recorded",
      status: alreadyClosed ? "Alert is already closed" : (STATUS_TEXT[action]?.[answer.outcome] ?? answer.outcome),
      alertId: answer.incidentId ?? null,
      attachIdentity: attachIdentity === null ? null : storableText(attachIdentity),
    });
  }

  /** The attach identity an Opsgenie identifier names, or null when it names no alert we know. */
  async function identityOf(org: Organization, identifier: string, identifierType: opsgenie.IdentifierType): Promise<string | null> {
    if (identifierType === "alias") return opsgenie.attachIdentityOfAlias(identifier);
    // Opsgenie's alert id is the incident id we answered; tiny ids are never issued here.
    if (identifierType === "tiny" || !isUuid(identifier)) return null;
    return (await store.opsgenieRequests.attachIdentityOf(org.id, identifier)) ?? null;
  }

  async function opsgenieAction(action: "close" | "acknowledge", req: OpsgenieAlertActionRequest, context: HandlerContext) {
    const started = performance.now();
    const org = await opsgenieOrg(context);
    await deps.delivery.admitBody(org.id, "opsgenie", req.body.byteLength, context);
    const identifierType = (req.identifierType || "id") as opsgenie.IdentifierType;
    if (!opsgenie.IDENTIFIER_TYPES.includes(identifierType)) {
      throw new OpsgenieUnprocessableError({ identifierType: "Identifier type should be one of [id, alias, tiny]." });
    }
    if (req.identifier.trim() === "") throw new OpsgenieUnprocessableError({ identifier: "Identifier can not be empty." });
    const body =
      req.body.byteLength === 0
        ? undefined
        : parse(req.body, req.contentType, () => new OpsgenieUnprocessableError({ body: "Request body should be valid JSON." }));
    const attachIdentity = await identityOf(org, req.identifier, identifierType);
    const delivery = mapOpsgenie(() => opsgenie.mapAction(action, attachIdentity ?? "", body, { receivedAt: new Date() }));
    const opsgenieAction = action === "close" ? "Close" : "Acknowledge";
    const requestId = await beginRequest(org, opsgenieAction, identifierType === "alias" ? req.identifier : "");
    // An identifier that names nothing is still accepted, as Opsgenie does; the request status
    // says the alert does not exist.
    const answer: TriggerAnswer = attachIdentity === null ? { outcome: "ignored" } : await deliver(org, "opsgenie", opsgenie.badge, body, delivery, context);
    await finishRequest(requestId, opsgenieAction, answer, attachIdentity);
    return { result: OPSGENIE_ACCEPTED, took: elapsedSeconds(started), requestId };
  }

  return {
    async enqueuePagerDutyEvent(req: DeliverRequest, context: HandlerContext) {
      const body = parse(req.body, req.contentType, (reason) => new PagerDutyInvalidEventError([`Malformed JSON: ${reason}`]));
      const org = await pagerDutyOrg(body, context);
      await delivery.admitBody(org.id, "pagerduty", req.body.byteLength, context);
      const mapped = mapPagerDuty(() => pagerDuty.mapEvent(body, { receivedAt: new Date(), newDedupKey: () => generatedDedupKey(org, context) }));
      await deliver(org, "pagerduty", pagerDuty.badge, body, mapped.delivery, context);
      return { status: "success", message: PAGERDUTY_PROCESSED, dedupKey: mapped.dedupKey };
    },

    async enqueuePagerDutyV1Event(req: DeliverRequest, context: HandlerContext) {
      const body = parse(req.body, req.contentType, (reason) => new PagerDutyInvalidEventError([`Malformed JSON: ${reason}`]));
      const org = await pagerDutyOrg(body, context, "service_key");
      await delivery.admitBody(org.id, "pagerduty", req.body.byteLength, context);
      const mapped = mapPagerDuty(() => pagerDuty.mapV1Event(body, { receivedAt: new Date(), newDedupKey: () => generatedDedupKey(org, context) }));
      await deliver(org, "pagerduty", pagerDuty.badge, body, mapped.delivery, context);
      return { status: "success", message: PAGERDUTY_PROCESSED, incidentKey: mapped.dedupKey };
    },

    async enqueuePagerDutyChange(req: DeliverRequest, context: HandlerContext) {
      const body = parse(req.body, req.contentType, (reason) => new PagerDutyInvalidEventError([`Malformed JSON: ${reason}`]));
      const org = await pagerDutyOrg(body, context);
      await deps.delivery.admitBody(org.id, "pagerduty", req.body.byteLength, context);
      const delivery: AlertDelivery = mapPagerDuty(() => pagerDuty.mapChange(body, { receivedAt: new Date() }));
      const open = await clients.incidents.findLatestOpen({ orgId: org.id, source: pagerDuty.badge }, { signal: context.signal });
      let answer: TriggerAnswer = { outcome: "ignored" };
      if (open.incidentId !== undefined) {
        answer = await deliver(org, "pagerduty", pagerDuty.badge, body, { alert: { ...delivery.alert, attachIdentity: open.attachIdentity } }, context);
      }
      // No open incident (or it was resolved in between): the change is kept in the audit log.
      if (answer.outcome === "ignored") {
        await store.audit(org.id, "trigger.pagerduty_change", {
          summary: delivery.alert.summary ?? "",
          ...(delivery.alert.link ? { link: delivery.alert.link } : {}),
          eventId: delivery.alert.eventId ?? "",
          data: (delivery.alert.data ?? {}) as JsonObject,
        });
      }
      return { status: "success", message: PAGERDUTY_CHANGE_PROCESSED };
    },

    async createOpsgenieAlert(req: DeliverRequest, context: HandlerContext) {
      const started = performance.now();
      const org = await opsgenieOrg(context);
      await delivery.admitBody(org.id, "opsgenie", req.body.byteLength, context);
      const body = parse(req.body, req.contentType, () => new OpsgenieUnprocessableError({ body: "Request body should be valid JSON." }));
      const mapped = mapOpsgenie(() => opsgenie.mapCreate(body, { receivedAt: new Date() }));
      const requestId = await beginRequest(org, "Create", mapped.alias);
      const answer = await deliver(org, "opsgenie", opsgenie.badge, body, mapped.delivery, context);
      await finishRequest(requestId, "Create", answer, mapped.delivery.alert.attachIdentity ?? null);
      return { result: OPSGENIE_ACCEPTED, took: elapsedSeconds(started), requestId };
    },

    closeOpsgenieAlert: (req: OpsgenieAlertActionRequest, context: HandlerContext) => opsgenieAction("close", req, context),
    acknowledgeOpsgenieAlert: (req: OpsgenieAlertActionRequest, context: HandlerContext) => opsgenieAction("acknowledge", req, context),

    async getOpsgenieRequestStatus(req: GetOpsgenieRequestStatusRequest, context: HandlerContext) {
      const started = performance.now();
      const org = await opsgenieOrg(context);
      const notFound = () => new NotFoundError("Request not found. It might not be processed, yet.");
      if (!isUuid(req.requestId)) throw notFound();
      const row = await store.opsgenieRequests.find(org.id, req.requestId);
      // A request still processing (or whose processing a crash cut short) reads as Opsgenie's
      // not-yet-processed answer, so clients poll again.
      if (row?.state !== "processed") throw notFound();
      return {
        data: {
          success: true,
          action: row.action,
          processedAt: row.processed_at!.toISOString(),
          integrationId: org.id,
          isSuccess: row.is_success ?? false,
          status: row.status ?? "",
          alertId: row.alert_id ?? "",
          alias: row.alias,
          outcome: row.outcome ?? "",
        },
        took: elapsedSeconds(started),
        requestId: req.requestId,
      };
    },
  };
}
