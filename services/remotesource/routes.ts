import { randomUUID } from "node:crypto";
import { decodeCursor, encodeCursor, pageLimit, pageOf } from "../runtime/page-cursor.js";
import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  ConformanceReportSchema,
  ListRemoteSourcesResponseSchema,
  type RemoteSourcesService,
  type RemoteSourceAuth,
} from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { RawResultSchema } from "../../gen/warroom/sourceprotocol/v1/source_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/auth.js";
import { recordAudit } from "../runtime/events.js";
import { isUuid } from "../runtime/ids.js";
import { AlreadyExistsError, InvalidArgumentError, UnprocessablePayloadError } from "../runtime/errors.js";
import { ReadRequestError, type ReadOutcome } from "../remotesource-kit/client/source-client.js";
import { runConformanceCheck, type CheckResult } from "../remotesource-kit/conformance.js";
import {
  AUDIT_KINDS,
  clientFor,
  loadConnection,
  openCredentials,
  recordStatus,
  sealCredentials,
  toRemoteSource,
  validateBaseUrl,
  validateCredentials,
  validateName,
  validateTenantRef,
  validateTransport,
} from "./connections.js";
import type { RemoteSourceDeps } from "./deps.js";
import type { ConnectionRow } from "./store.js";
import { CREDENTIALS_REJECTED } from "../remotesource-kit/protocol/limits.js";
import { toProtocolJson } from "../remotesource-kit/protocol/protocol-json.js";
import { isReadCall, READ_CALLS } from "../remotesource-kit/protocol/protocol-routes.js";

type Impl = ServiceImpl<typeof RemoteSourcesService>;

const LAST_ERROR_MAX = 1000;

/**
 * Every RemoteSourcesService method: create, list, get, update, delete, test and read
 * connections, and the internal ResolveConnection.
 */
export function createRemoteSourcesRoutes(deps: RemoteSourceDeps): Impl {
  const { sql, clients } = deps;

  async function uniqueName<T>(work: () => Promise<T>, name: string): Promise<T> {
    try {
      return await work();
    } catch (err) {
      if ((err as { code?: string }).code === "23505") throw new AlreadyExistsError(`a remote source named ${JSON.stringify(name)} already exists`);
      throw err;
    }
  }

  return {
    async createRemoteSource(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const name = validateName(req.name);
      const baseUrl = validateBaseUrl(deps.policy, req.baseUrl);
      const transport = validateTransport(req.transport);
      const tenantRef = validateTenantRef(req.tenantRef, principal.orgId);
      const credentials = validateCredentials(req.auth, baseUrl, deps.httpBearerHosts);
      const id = randomUUID();
      const sealed = sealCredentials(deps, principal.orgId, id, credentials);
      const row = await uniqueName(
        () =>
          sql.begin(async (tx) => {
            const [inserted] = await tx<ConnectionRow[]>`
              insert into remotesource.connections (id, org_id, name, base_url, transport, tenant_ref, key_id, credential_ciphertext, created_by)
              values (${id}, ${principal.orgId}, ${name}, ${baseUrl}, ${transport}, ${tenantRef}, ${sealed.keyId}, ${sealed.ciphertext}, ${principal.email})
              returning *`;
            await recordAudit(deps.outbox, tx, {
              orgId: principal.orgId,
              kind: AUDIT_KINDS.created,
              actor: principal.email,
              data: { id, name, baseUrl, transport },
            });
            return inserted!;
          }),
        name,
      );
      deps.outbox.poke();
      return toRemoteSource(row);
    },

    async listRemoteSources(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const limit = pageLimit(req.limit, 1000, 1000);
      const after = req.cursor ? decodeCursor("r", req.cursor, isUuid) : undefined;
      const afterClause =
        after === undefined
          ? sql``
          : sql`and (created_at, id) > (select created_at, id from remotesource.connections where org_id = ${principal.orgId} and id = ${after})`;
      const rows = await sql<ConnectionRow[]>`
        select * from remotesource.connections where org_id = ${principal.orgId} ${afterClause} order by created_at, id limit ${limit + 1}`;
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("r", last.id));
      return create(ListRemoteSourcesResponseSchema, { remoteSources: page.map(toRemoteSource), ...(nextCursor ? { nextCursor } : {}) });
    },

    async getRemoteSource(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return toRemoteSource(await loadConnection(deps, principal.orgId, req.id));
    },

    async updateRemoteSource(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const current = await loadConnection(deps, principal.orgId, req.id);
      const name = req.name === undefined ? current.name : validateName(req.name);
      const baseUrl = req.baseUrl === undefined ? current.base_url : validateBaseUrl(deps.policy, req.baseUrl);
      const transport = req.transport === undefined ? current.transport : validateTransport(req.transport);
      const tenantRef = req.tenantRef === undefined ? current.tenant_ref : validateTenantRef(req.tenantRef, principal.orgId);
      let sealed: { keyId: string; ciphertext: Buffer } | undefined;
      if (req.auth) {
        sealed = sealCredentials(deps, principal.orgId, current.id, validateCredentials(req.auth, baseUrl, deps.httpBearerHosts));
      } else if (baseUrl !== current.base_url && !baseUrl.startsWith("https:")) {
        // A stored client certificate needs https; the stored credential is checked as a new one would be.
        validateCredentials(openCredentials(deps, current) as RemoteSourceAuth, baseUrl, deps.httpBearerHosts);
      }
      // A new target or credential has not been tested: the connection starts over as untested.
      const retarget = sealed !== undefined || baseUrl !== current.base_url || transport !== current.transport || tenantRef !== current.tenant_ref;
      const changed = [
        ...(name !== current.name ? ["name"] : []),
        ...(baseUrl !== current.base_url ? ["baseUrl"] : []),
        ...(transport !== current.transport ? ["transport"] : []),
        ...(tenantRef !== current.tenant_ref ? ["tenantRef"] : []),
        ...(sealed ? ["auth"] : []),
      ];
      const row = await uniqueName(
        () =>
          sql.begin(async (tx) => {
            const [updated] = await tx<ConnectionRow[]>`
              update remotesource.connections set
                name = ${name}, base_url = ${baseUrl}, transport = ${transport}, tenant_ref = ${tenantRef},
                key_id = ${sealed?.keyId ?? current.key_id},
                credential_ciphertext = ${sealed?.ciphertext ?? current.credential_ciphertext},
                status = case when ${retarget} then 'untested' else status end,
                last_error = case when ${retarget} then null else last_error end,
                revision = revision + case when ${retarget} then 1 else 0 end,
                updated_at = now()
              where id = ${current.id} and org_id = ${principal.orgId}
              returning *`;
            if (updated)
              await recordAudit(deps.outbox, tx, {
                orgId: principal.orgId,
                kind: AUDIT_KINDS.updated,
                actor: principal.email,
                data: { id: current.id, changed },
              });
            return updated;
          }),
        name,
      );
      deps.outbox.poke();
      return toRemoteSource(row ?? (await loadConnection(deps, principal.orgId, req.id)));
    },

    async deleteRemoteSource(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const row = await loadConnection(deps, principal.orgId, req.id);
      await sql.begin(async (tx) => {
        await tx`delete from remotesource.connections where id = ${row.id} and org_id = ${principal.orgId}`;
        await recordAudit(deps.outbox, tx, {
          orgId: principal.orgId,
          kind: AUDIT_KINDS.deleted,
          actor: principal.email,
          data: { id: row.id, name: row.name },
        });
      });
      deps.outbox.poke();
      return {};
    },

    async testRemoteSource(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const row = await loadConnection(deps, principal.orgId, req.id);
      const result = await runConformanceCheck(clientFor(deps, row));
      const failed = result.checks.filter((c) => !c.ok);
      const lastError = failed.length === 0 ? null : summarize(failed.map((c) => `${c.name}: ${c.detail}`).join("; "));
      await recordStatus(deps, row, result.ok ? "connected" : "failed", lastError, { tested: true });
      await sql.begin((tx) =>
        recordAudit(deps.outbox, tx, {
          orgId: principal.orgId,
          kind: AUDIT_KINDS.tested,
          actor: principal.email,
          data: { id: row.id, ok: result.ok, failed: failed.map((c) => c.name) },
        }),
      );
      deps.outbox.poke();
      // The report keeps its shape {name, ok, detail}; the rule a failing check applies and any
      // warning are written into its detail.
      return create(ConformanceReportSchema, { ...result, checks: result.checks.map((c) => ({ name: c.name, ok: c.ok, detail: reportDetail(c) })) });
    },

    async readRemoteSource(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (!isReadCall(req.call)) throw new InvalidArgumentError(`call must be one of ${READ_CALLS.join(", ")}`);
      const row = await loadConnection(deps, principal.orgId, req.id);
      const request: JsonObject = { ...(req.request ?? {}) };
      // The tenant is the connection's, whatever the caller sends.
      delete request.tenant;
      let outcome: ReadOutcome;
      try {
        outcome = await clientFor(deps, row).read(req.call, request);
      } catch (err) {
        if (err instanceof ReadRequestError) throw new InvalidArgumentError(err.message);
        throw err;
      }
      if (outcome.failure?.kind === "credentials-rejected") {
        // Shown as failed until the credential is updated (or a test passes again).
        await recordStatus(deps, row, "failed", CREDENTIALS_REJECTED, { tested: false });
      }
      return fromJson(StructSchema, toProtocolJson(RawResultSchema, outcome.result));
    },

    async resolveConnection(req) {
      // Intake asks for a remote trigger payload's connectionId; an unknown one is a payload the
      // endpoint cannot act on.
      if (!isUuid(req.connectionId) || !isUuid(req.orgId)) throw new UnprocessablePayloadError("Unknown remote connection");
      const [row] = await sql<ConnectionRow[]>`
        select * from remotesource.connections where org_id = ${req.orgId} and id = ${req.connectionId}`;
      if (!row) throw new UnprocessablePayloadError("Unknown remote connection");
      return toRemoteSource(row);
    },
  };
}

/** A check's detail as the report shows it, with its rule and warnings. */
export function reportDetail(check: CheckResult): string {
  const parts = [check.detail];
  if (check.rule) parts.push(`rule: "${check.rule}"`);
  for (const warning of check.warnings) parts.push(`warning: ${warning}`);
  return parts.join("; ");
}

function summarize(text: string): string {
  return text.length <= LAST_ERROR_MAX ? text : `${text.slice(0, LAST_ERROR_MAX - 1)}…`;
}
