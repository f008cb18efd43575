import { randomUUID } from "node:crypto";
import { encodeCursor, pageOf, pageRequest } from "../runtime/data/page-cursor.js";
import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { ListRemoteSourcesResponseSchema, type RemoteSourcesService, type RemoteSourceAuth } from "../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { recordAudit } from "../runtime/transport/events.js";
import { isUuid } from "../runtime/ids.js";
import { AlreadyExistsError } from "../runtime/errors.js";
import {
  AUDIT_KINDS,
  connectionsChanged,
  loadConnection,
  openCredentials,
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

/** Create, list, get, update and delete an organization's remote-source connections. */
export function createConnectionHandlers(
  deps: RemoteSourceDeps,
): Pick<
  ServiceImpl<typeof RemoteSourcesService>,
  "createRemoteSource" | "listRemoteSources" | "getRemoteSource" | "updateRemoteSource" | "deleteRemoteSource"
> {
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
      await connectionsChanged(deps, principal.orgId);
      return toRemoteSource(row);
    },

    async listRemoteSources(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const { limit, after } = pageRequest(req, "r", isUuid, { fallback: 1000, max: 1000 });
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
      await connectionsChanged(deps, principal.orgId);
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
      await connectionsChanged(deps, principal.orgId);
      return {};
    },
  };
}
