import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, authorize, bearerToken, type Role } from "../runtime/credentials/auth.js";
import { InvalidArgumentError, UnauthenticatedError } from "../runtime/errors.js";
import { INGEST_TOKEN_REVOKED, INVALID_INGEST_TOKEN } from "../runtime/credentials/ingest-token-cache.js";
import { newHexSecret, sha256 } from "../runtime/credentials/secrets.js";
import type { IdentityDeps } from "./deps.js";
import {
  AUDIT,
  CREDENTIAL_KINDS,
  type CredentialKind,
  insertAuditEvent,
  lockCaller,
  type OrgCredentialRow,
  type OrganizationRow,
  organizationBySlug,
  writeCredentialChanged,
} from "./store.js";

/**
 * An organization's own credentials (the ingest token, the chat and alert-router secrets): issued
 * by its admins, resolved to the organization by the receivers.
 */
export function createOrgCredentialHandlers(
  deps: Pick<IdentityDeps, "sql" | "clients" | "outbox" | "broadcast">,
): Pick<
  ServiceImpl<typeof IdentityService>,
  "issueIngestToken" | "issueChatSecret" | "issueAlertRouterSecret" | "resolveIngestToken" | "resolveReceiverSecret"
> {
  const { sql, clients, outbox, broadcast } = deps;

  async function issue(context: HandlerContext, org: string, kind: CredentialKind, allowed: readonly Role[], auditKind: string): Promise<string> {
    const principal = await authorize(clients, context, org, allowed);
    const value = newHexSecret();
    const hash = sha256(value);
    const previous = await sql.begin(async (tx) => {
      // A secret grants access: issued only while the caller still may, as of this transaction.
      await lockCaller(tx, principal, allowed);
      const [row] = await tx<OrgCredentialRow[]>`select hash from identity.org_credentials where org_id = ${principal.orgId} and kind = ${kind} for update`;
      await tx`
        insert into identity.org_credentials (org_id, kind, hash, issued_by) values (${principal.orgId}, ${kind}, ${hash}, ${principal.userId})
        on conflict (org_id, kind) do update set hash = excluded.hash, issued_at = now(), issued_by = excluded.issued_by`;
      await insertAuditEvent(tx, principal.orgId, auditKind, principal.email, { replaced: row !== undefined });
      await writeCredentialChanged(outbox, tx, principal.orgId, kind, row?.hash);
      return row?.hash;
    });
    outbox.poke();
    // Before the new value is handed out, every process that cached the old one drops it.
    if (previous && kind === CREDENTIAL_KINDS.ingest) await broadcast.publish(INGEST_TOKEN_REVOKED, previous.toString("hex"));
    return value;
  }

  async function resolve(kind: CredentialKind, value: string): Promise<OrganizationRow | undefined> {
    if (!/^[0-9a-f]{64}$/.test(value)) return undefined;
    const [row] = await sql<OrganizationRow[]>`
      select o.id, o.slug from identity.org_credentials c join identity.organizations o on o.id = c.org_id
      where c.hash = ${sha256(value)} and c.kind = ${kind}`;
    return row;
  }

  return {
    async issueIngestToken(req, context) {
      return { token: await issue(context, req.org, CREDENTIAL_KINDS.ingest, ADMINS, AUDIT.ingestTokenIssued) };
    },

    async issueChatSecret(req, context) {
      return { secret: await issue(context, req.org, CREDENTIAL_KINDS.chat, ADMINS, AUDIT.chatSecretIssued) };
    },

    async issueAlertRouterSecret(req, context) {
      return { secret: await issue(context, req.org, CREDENTIAL_KINDS.alertrouter, ADMINS, AUDIT.alertRouterSecretIssued) };
    },

    async resolveIngestToken(req, context) {
      // The token rides in the Authorization header (redacted from logs); the body field is read
      // only from callers older than that.
      const token = bearerToken(context.requestHeader.get("authorization")) ?? req.token;
      const org = await resolve(CREDENTIAL_KINDS.ingest, token);
      if (!org) throw new UnauthenticatedError(INVALID_INGEST_TOKEN);
      return org;
    },

    async resolveReceiverSecret(req, context) {
      const kind = req.kind === "chat" ? CREDENTIAL_KINDS.chat : req.kind === "alertrouter" ? CREDENTIAL_KINDS.alertrouter : undefined;
      if (!kind) throw new InvalidArgumentError("kind must be chat or alertrouter");
      // The secret rides in the receiver's own header, as the sender sent it; the body field is read
      // only from callers older than that.
      const secret = context.requestHeader.get(`x-service-${req.kind}-secret`) || req.secret;
      const org = secret ? await resolve(kind, secret) : undefined;
      let reason: string | undefined;
      if (!secret) reason = "secret missing";
      else if (!org) reason = "secret wrong";
      else if (req.orgSlug && org.slug !== req.orgSlug) reason = "slug is not the secret's organization";
      if (reason) {
        // The caller gets a uniform 401; the reason is kept for the organization's admins.
        const target = req.orgSlug ? await organizationBySlug(sql, req.orgSlug) : org;
        const remoteAddress = context.requestHeader.get("x-forwarded-for") ?? "";
        const data = { receiver: req.kind, reason, remoteAddress, count: 1 };
        const key = [AUDIT.receiverAuthFailed, target?.id ?? "", req.kind, reason, remoteAddress].join("|");
        // One row per organization, receiver, reason and client address a minute, with a count.
        await sql`
          insert into identity.audit_events as a (org_id, kind, actor, data, coalesce_key)
          values (${target?.id ?? null}, ${AUDIT.receiverAuthFailed}, 'receiver', ${sql.json(data)},
                  ${key} || '|' || to_char(date_trunc('minute', now()) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI'))
          on conflict (coalesce_key) where coalesce_key is not null
          do update set data = jsonb_set(a.data, '{count}', to_jsonb(coalesce((a.data->>'count')::int, 1) + 1))`;
        throw new UnauthenticatedError("unauthorized");
      }
      return org!;
    },
  };
}
