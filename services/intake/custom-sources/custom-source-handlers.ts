import { randomUUID } from "node:crypto";
import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import { fromJson, toJson } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  CreateCustomSourceResponseSchema,
  CustomSourceCredentialSchema,
  type CustomSourceRule,
  ListCustomSourceDeliveriesResponseSchema,
  ListCustomSourcePayloadsResponseSchema,
  ListCustomSourcePresetsResponseSchema,
  ListCustomSourcesResponseSchema,
  PreviewCustomSourceResponseSchema,
} from "../../../gen/warroom/intake/v1/custom_sources_pb.js";
import { OrganizationSchema } from "../../../gen/warroom/identity/v1/identity_pb.js";
import { type IntakeService, TriggerResponseSchema } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../../runtime/credentials/auth.js";
import { type Broadcast, CUSTOM_SOURCE_CHANGED } from "../../runtime/transport/broadcast.js";
import type { Clients } from "../../runtime/transport/clients.js";
import { InvalidArgumentError, NotFoundError, RateLimitedError, UnavailableError } from "../../runtime/errors.js";
import { ShareExceeded } from "../fair-shares.js";
import type { AuditRecord } from "../../runtime/transport/events.js";
import { isUuid } from "../../runtime/ids.js";
import type { Outbox } from "../../runtime/data/outbox.js";
import { newHexSecret, sha256 } from "../../runtime/credentials/secrets.js";
import type { DeliveryPath } from "../delivery.js";
import { compileRules, evaluateRules } from "../../cel/cel-mapping.js";
import type { ReceiverFailureStore } from "../store.js";
import type { Grouping } from "../grouping/grouping.js";
import { jsonBytesUpTo, LARGE_BODY_BYTES, type LargeBodies } from "./large-bodies.js";
import { createCustomSourceDelivery, type RecordWriter, toMappedDelivery } from "./custom-source-delivery.js";
import {
  authOfRow,
  createCompiledRulesCache,
  headersForRules,
  rulesToJson,
  sealSourceSecret,
  toCustomSource,
  triggerUrl,
  unsealedForSignature,
  validateDescription,
  validateName,
} from "./custom-source-records.js";
import { senderSecret, type SourceAuth, sourceAuthFrom } from "./source-auth.js";
import type { SecretBox } from "../../runtime/credentials/secret-box.js";
import type { Logger } from "../../runtime/observability/logger.js";
import { PRESETS, presetNamed } from "./presets.js";
import { type CustomSourceRow, type CustomSourceStore, SOURCES_PER_ORG } from "./store.js";

/**
 * What custom sources need beyond intake's own deps: their store, the outbox's relay to poke
 * after a change's audit record, the public URL, and the broadcast that tells every replica a
 * source changed.
 */
export interface CustomSourcesDeps {
  store: CustomSourceStore;
  outbox: Pick<Outbox, "poke">;
  publicUrl: string;
  broadcast: Broadcast;
  /** Writes the deliveries' kept payloads and log rows (one per process; stopping flushes it). */
  records: RecordWriter;
  /** Worker threads for large bodies (INTAKE_LARGE_BODY_WORKERS); none: on the event loop. */
  largeBodies?: LargeBodies | undefined;
  /** Seals the secrets of sources that check signatures (SECRETS_KEYS); got when first needed. */
  secretBox?: (() => SecretBox) | undefined;
  logger?: Logger | undefined;
}

type CustomSourceMethods =
  | "deliverCustomSource"
  | "deliverCustomSourceWithPathSecret"
  | "createCustomSource"
  | "listCustomSources"
  | "listCustomSourcePresets"
  | "getCustomSource"
  | "updateCustomSource"
  | "deleteCustomSource"
  | "rotateCustomSourceCredential"
  | "revokeCustomSourceCredential"
  | "listCustomSourceDeliveries"
  | "listCustomSourcePayloads"
  | "previewCustomSource";

/**
 * A preview's work on a worker thread (its rules, the grouping override's key); a full queue is 429
 * with Retry-After, as for a delivery.
 */
async function previewOnThread<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (!(err instanceof ShareExceeded)) throw err;
    throw new RateLimitedError(
      `This server has too many large payloads waiting to be mapped; preview again after ${err.retryAfterSeconds} s (Retry-After)`,
      err.retryAfterSeconds,
    );
  }
}

/** The auth options as an audit record shows them: which ways, never a secret. */
function authAudit(auth: SourceAuth): JsonObject {
  return {
    secretInPath: auth.secretInPath,
    basicAuth: auth.basicAuth,
    secretHeader: auth.secretHeader,
    signatureHeader: auth.signature?.header ?? "",
  };
}

export const AUDIT_KINDS = {
  created: "custom_source.created",
  updated: "custom_source.updated",
  deleted: "custom_source.deleted",
  rotated: "custom_source.credential_rotated",
  revoked: "custom_source.credential_revoked",
} as const;

/** Where measuring a preview's payload for the large-body budget stops: past any body the gateway reads. */
const MAX_PREVIEW_CHARGE_BYTES = 16 * 1024 * 1024;

/**
 * Custom sources: an admin's CRUD of a source and its credential, the source's trigger routes,
 * its kept payloads, delivery log and preview.
 */
export function createCustomSourceHandlers(deps: {
  clients: Clients;
  delivery: DeliveryPath;
  customSources: CustomSourcesDeps | undefined;
  grouping?: Grouping | undefined;
  /** Where failed credentials are counted, shared with the chat and alert-router receivers. */
  failures: ReceiverFailureStore;
}): Pick<ServiceImpl<typeof IntakeService>, CustomSourceMethods> {
  const { clients, delivery } = deps;
  const config = deps.customSources;
  const store = config?.store;
  const compiled = createCompiledRulesCache();
  const receiver =
    config && store
      ? createCustomSourceDelivery({
          store,
          compiled,
          delivery,
          failures: deps.failures,
          broadcast: config.broadcast,
          records: config.records,
          largeBodies: config.largeBodies,
          secretBox: config.secretBox,
          logger: config.logger,
        })
      : undefined;

  function need<T>(value: T | undefined): T {
    if (value === undefined) throw new UnavailableError("custom sources are not available in this process");
    return value;
  }

  async function sourceOf(orgId: string, id: string): Promise<CustomSourceRow> {
    if (!isUuid(id)) throw new NotFoundError("no such custom source");
    const row = await need(store).get(orgId, id);
    if (!row) throw new NotFoundError("no such custom source");
    return row;
  }

  function credentialOf(row: CustomSourceRow, secret: string) {
    const url = triggerUrl(need(config).publicUrl, row.id);
    return create(CustomSourceCredentialSchema, { secret, url, ...(row.secret_in_path ? { pathUrl: `${url}/${secret}` } : {}) });
  }

  /**
   * Runs a change (which writes its audit record with it, see CustomSourceStore); a change to an
   * existing source is then broadcast before it is answered, so no replica serves the old
   * credential or rules after.
   */
  async function audited<T>(
    principal: { orgId: string; email: string },
    kind: string,
    data: JsonObject & { id: string },
    work: (store: CustomSourceStore, audit: AuditRecord) => Promise<T>,
  ): Promise<T> {
    const { store, outbox, broadcast } = need(config);
    const result = await work(store, { orgId: principal.orgId, kind, actor: principal.email, data });
    outbox.poke();
    if (kind !== AUDIT_KINDS.created) await broadcast.publish(CUSTOM_SOURCE_CHANGED, data.id);
    return result;
  }

  /** An admin's source, once the records waiting to be written are written: for its log and kept payloads. */
  async function sourceWithRecordsWritten(req: { org: string; id: string }, context: HandlerContext): Promise<CustomSourceRow> {
    const principal = await authorize(clients, context, req.org, ADMINS);
    const row = await sourceOf(principal.orgId, req.id);
    await need(config).records.flush();
    return row;
  }

  /** An admin's change of one source that answers nothing but itself: a delete, a revocation. */
  async function changeSource(
    req: { org: string; id: string },
    context: HandlerContext,
    kind: string,
    write: (store: CustomSourceStore, orgId: string, id: string, audit: AuditRecord) => Promise<unknown>,
  ): Promise<void> {
    const principal = await authorize(clients, context, req.org, ADMINS);
    const current = await sourceOf(principal.orgId, req.id);
    await audited(principal, kind, { id: current.id, name: current.name }, (store, audit) => write(store, principal.orgId, current.id, audit));
  }

  /** The secret to issue: the sender's own when given (checked), else a new one. */
  function secretToIssue(given: string): string {
    return given ? senderSecret(given) : newHexSecret();
  }

  /** Rules as saved: given, or the preset's; compiled now so a bad one is refused at once. */
  function rulesToSave(rules: CustomSourceRule[], preset: string): { rules: CustomSourceRule[]; preset: string } {
    if (rules.length === 0 && preset) {
      const found = presetNamed(preset);
      if (!found) throw new InvalidArgumentError(`preset: no preset named ${JSON.stringify(preset)}; use ${PRESETS.map((p) => p.name).join(", ")}`);
      compileRules(found.rules);
      return { rules: found.rules, preset };
    }
    compileRules(rules);
    return { rules, preset };
  }

  return {
    async deliverCustomSource(req, context) {
      return create(TriggerResponseSchema, await need(receiver).deliver(req, context));
    },
    async deliverCustomSourceWithPathSecret(req, context) {
      return create(TriggerResponseSchema, await need(receiver).deliver(req, context));
    },

    async createCustomSource(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const name = validateName(req.name);
      const description = validateDescription(req.description);
      const saved = rulesToSave(req.rules, req.preset.trim());
      const auth = sourceAuthFrom(req.auth ?? presetNamed(saved.preset)?.auth);
      const secret = secretToIssue(req.secret);
      const id = randomUUID();
      const { sealed, sealedBy } = sealSourceSecret(config?.secretBox, id, secret, auth.signature !== null);
      const source = {
        id,
        orgId: principal.orgId,
        orgSlug: principal.orgSlug,
        name,
        rules: rulesToJson(saved.rules),
        auth,
        preset: saved.preset,
        description,
        credential: { hash: sha256(secret), sealed, sealedBy },
      };
      const row = await audited(principal, AUDIT_KINDS.created, { id, name, preset: saved.preset, ...authAudit(auth) }, (store, audit) =>
        store.create(source, SOURCES_PER_ORG, audit),
      );
      return create(CreateCustomSourceResponseSchema, { source: toCustomSource(row, need(config).publicUrl), credential: credentialOf(row, secret) });
    },

    async listCustomSources(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const rows = await need(store).list(principal.orgId);
      return create(ListCustomSourcesResponseSchema, { customSources: rows.map((row) => toCustomSource(row, need(config).publicUrl)) });
    },

    async listCustomSourcePresets(req, context) {
      await authorize(clients, context, req.org, ANY_MEMBER);
      return create(ListCustomSourcePresetsResponseSchema, { presets: PRESETS });
    },

    async getCustomSource(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return toCustomSource(await sourceOf(principal.orgId, req.id), need(config).publicUrl);
    },

    async updateCustomSource(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const current = await sourceOf(principal.orgId, req.id);
      if (req.rules.length > 0) compileRules(req.rules);
      const rules = req.rules.length > 0 ? rulesToJson(req.rules) : current.rules;
      const auth = req.auth ? sourceAuthFrom(req.auth) : authOfRow(current);
      if (auth.signature && !current.secret_sealed) throw unsealedForSignature();
      const description = req.description === undefined ? current.description : validateDescription(req.description);
      const row = await audited(
        principal,
        AUDIT_KINDS.updated,
        { id: current.id, name: current.name, rules: req.rules.length > 0, description: req.description !== undefined, ...authAudit(auth) },
        (store, audit) => store.update(principal.orgId, current.id, { rules, auth, description }, audit),
      );
      if (!row) throw new NotFoundError("no such custom source");
      return toCustomSource(row, need(config).publicUrl);
    },

    async deleteCustomSource(req, context) {
      await changeSource(req, context, AUDIT_KINDS.deleted, (store, orgId, id, audit) => store.delete(orgId, id, audit));
      return {};
    },

    async rotateCustomSourceCredential(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const current = await sourceOf(principal.orgId, req.id);
      const secret = secretToIssue(req.secret);
      const { sealed, sealedBy } = sealSourceSecret(config?.secretBox, current.id, secret, current.signature !== null);
      const row = await audited(principal, AUDIT_KINDS.rotated, { id: current.id, name: current.name, senderSecret: req.secret !== "" }, (store, audit) =>
        store.rotate(principal.orgId, current.id, { hash: sha256(secret), sealed, sealedBy }, audit),
      );
      if (!row) throw new NotFoundError("no such custom source");
      return credentialOf(row, secret);
    },

    async revokeCustomSourceCredential(req, context) {
      await changeSource(req, context, AUDIT_KINDS.revoked, (store, orgId, id, audit) => store.revoke(orgId, id, audit));
      return {};
    },

    async listCustomSourceDeliveries(req, context) {
      const row = await sourceWithRecordsWritten(req, context);
      const entries = await need(store).deliveries(row.id);
      return create(ListCustomSourceDeliveriesResponseSchema, {
        deliveries: entries.map((entry) => ({
          id: entry.seq,
          at: timestampFromDate(entry.at),
          outcome: entry.outcome,
          warnings: entry.warnings,
          ...(entry.incident_id ? { incidentId: entry.incident_id } : {}),
          ...(entry.rule ? { rule: entry.rule } : {}),
          ...(entry.error ? { error: entry.error } : {}),
          ...(entry.reason ? { reason: entry.reason } : {}),
        })),
      });
    },

    async listCustomSourcePayloads(req, context) {
      const row = await sourceWithRecordsWritten(req, context);
      const payloads = await need(store).payloads(row.id);
      return create(ListCustomSourcePayloadsResponseSchema, {
        payloads: payloads.map((payload) => ({
          id: payload.seq,
          receivedAt: timestampFromDate(payload.received_at),
          body: fromJson(ValueSchema, payload.body),
          headers: payload.headers,
          query: payload.query,
          truncated: payload.truncated,
        })),
      });
    },

    async previewCustomSource(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const row = await sourceOf(principal.orgId, req.id);
      let body: unknown = req.body ? toJson(ValueSchema, req.body) : null;
      let headers: Record<string, string> = { ...req.headers };
      let query: Record<string, string> = { ...req.query };
      if (req.payloadId) {
        const kept = /^\d{1,18}$/.test(req.payloadId) ? await need(store).payload(row.id, BigInt(req.payloadId)) : undefined;
        if (!kept) throw new NotFoundError("no such payload of this source");
        body = kept.body;
        headers = kept.headers;
        query = kept.query;
      }
      // Compiled here even when a thread evaluates them: rules that do not compile are refused at once (400).
      const rules = req.rules.length > 0 ? compileRules(req.rules) : compiled.get(row);
      // A large payload spends the organization's budget of large bodies, as a delivery of it would.
      // Measured once: for the budget, and for whether the rules run on a thread.
      const bytes = jsonBytesUpTo(body, MAX_PREVIEW_CHARGE_BYTES);
      if (!req.payloadId) await delivery.admitBody(principal.orgId, `custom:${row.id}`, bytes, context);
      const input = { body, headers: headersForRules(headers), query, receivedAt: new Date() };
      const largeBodies = need(config).largeBodies;
      // A large payload's rules run on a worker thread in the organization's turn, as a large delivery's do.
      const result =
        largeBodies && bytes > LARGE_BODY_BYTES
          ? await previewOnThread(() =>
              largeBodies.evaluate(principal.orgId, {
                body,
                headers: input.headers,
                query,
                receivedAtMs: input.receivedAt.getTime(),
                rules: req.rules.length > 0 ? { given: rulesToJson(req.rules) } : { source: { id: row.id, version: row.version, rules: row.rules } },
              }),
            )
          : evaluateRules(rules, input);
      const fields = result.fields;
      const response = create(PreviewCustomSourceResponseSchema, {
        rules: result.verdicts,
        warnings: result.warnings,
        ...(result.matchedRule ? { matchedRule: result.matchedRule } : {}),
        ...(result.error ? { error: result.error } : {}),
      });
      if (fields && !result.error) {
        response.fields = {
          $typeName: "warroom.intake.v1.CustomSourceMappedFields",
          kind: fields.kind,
          title: fields.title,
          severity: fields.kind === "ignore" ? "" : fields.severity,
          attachKey: fields.attachKey,
          eventId: fields.eventId,
          ...(fields.entity ? { entityKind: fields.entity.kind, entityId: fields.entity.id } : {}),
          ...(fields.summary !== undefined ? { summary: fields.summary } : {}),
          ...(fields.link !== undefined ? { link: fields.link } : {}),
          ...(fields.runbookUrl !== undefined ? { runbookUrl: fields.runbookUrl } : {}),
          ...(fields.ignoreReason !== undefined ? { ignoreReason: fields.ignoreReason } : {}),
        };
      }
      // Where it would land: the open incident holding its attach identity, read, never written.
      const mapped = toMappedDelivery(row, body, new Uint8Array(), result);
      if (mapped.outcome === "ignored") {
        response.would = "dropped";
        return response;
      }
      // The organization's grouping override, as a delivery would apply it, without moving anything on.
      const grouping = deps.grouping;
      if (mapped.alert && grouping) {
        const alert = mapped.alert;
        await previewOnThread(() =>
          grouping.apply(create(OrganizationSchema, { id: principal.orgId, slug: principal.orgSlug }), alert, body, { dryRun: true }),
        );
      }
      const identity = mapped.alert?.attachIdentity ?? "";
      response.attachIdentity = identity;
      const open = identity ? await clients.incidents.findLatestOpen({ orgId: principal.orgId, source: row.name, attachIdentity: identity }) : undefined;
      const kind = mapped.alert?.kind ?? "alert";
      if (open?.incidentId) {
        response.incidentId = open.incidentId;
        response.would = kind === "alert" ? "attached" : "recorded";
      } else {
        response.would = kind === "alert" ? "opened" : "ignored";
      }
      return response;
    },
  };
}
