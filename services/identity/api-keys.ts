import { randomBytes } from "node:crypto";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, ANY_MEMBER, authorize, bearerToken, type Role } from "../runtime/credentials/auth.js";
import { InvalidArgumentError, NotFoundError, UnauthenticatedError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { sha256 } from "../runtime/credentials/secrets.js";
import type { IdentityDeps } from "./deps.js";
import { requireSession } from "./member-changes.js";
import { type ApiKeyListRow, type ApiKeyRow, AUDIT, insertAuditEvent, type RevokedApiKeyRow, writeCredentialChanged } from "./store.js";

/** The most keys one list answers, newest first. */
export const API_KEY_LIST_LIMIT = 1000;

/** API keys: a member's long-lived credential, created and revoked with a session, listed. */
export function createApiKeyHandlers(
  deps: Pick<IdentityDeps, "sql" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IdentityService>, "createApiKey" | "listApiKeys" | "deleteApiKey"> {
  const { sql, clients, outbox } = deps;
  return {
    async createApiKey(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      // A key that could mint keys would outlive its own revocation through its children; a
      // person logs in to create one.
      requireSession(principal, req.org);
      const name = req.name.trim() || "api key";
      if (name.length > 100) throw new InvalidArgumentError("name must be at most 100 characters");
      const key = `wrk_${randomBytes(32).toString("hex")}`;
      const session = sha256(bearerToken(context.requestHeader.get("authorization")) ?? "");
      const id = await sql.begin(async (tx) => {
        // Only while the session that asks is live and its membership exists, under share locks on
        // both: a removal or a session revocation that committed meanwhile leaves no key behind
        // (it would outlive the revocation), and one in progress waits for this and revokes it.
        const [row] = await tx<ApiKeyRow[]>`
          insert into identity.api_keys (key_hash, org_id, user_id, name)
          select ${sha256(key)}, m.org_id, m.user_id, ${name}
          from identity.memberships m
          join identity.sessions s on s.org_id = m.org_id and s.user_id = m.user_id
          where m.org_id = ${principal.orgId} and m.user_id = ${principal.userId}
            and s.token_hash = ${session} and s.revoked_at is null and s.expires_at > now()
          for key share of m for share of s
          returning id`;
        if (!row) throw new UnauthenticatedError("invalid or expired credential");
        await insertAuditEvent(tx, principal.orgId, AUDIT.apiKeyCreated, principal.email, { id: row.id, name });
        return row.id;
      });
      return { id, key };
    },

    async listApiKeys(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const everyone = ADMINS.includes(principal.role as Role);
      // Only hashes are stored: a key is shown once, by createApiKey, and never again.
      const rows = await sql<ApiKeyListRow[]>`
        select k.id, k.name, u.email, k.created_at, k.last_used_at
        from identity.api_keys k join identity.users u on u.id = k.user_id
        where k.org_id = ${principal.orgId} and k.revoked_at is null and (k.user_id = ${principal.userId} or ${everyone})
        order by k.created_at desc, k.id limit ${API_KEY_LIST_LIMIT}`;
      return {
        apiKeys: rows.map((r) => ({
          id: r.id,
          name: r.name,
          email: r.email,
          createdAt: timestampFromDate(r.created_at),
          ...(r.last_used_at ? { lastUsedAt: timestampFromDate(r.last_used_at) } : {}),
        })),
      };
    },

    async deleteApiKey(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      requireSession(principal, req.org);
      if (!isUuid(req.id)) throw new NotFoundError("no such API key");
      await sql.begin(async (tx) => {
        // A member revokes their own keys; an admin may revoke any key of the organization.
        const rows = await tx<(RevokedApiKeyRow & { name: string; email: string })[]>`
          update identity.api_keys k set revoked_at = now() from identity.users u
          where k.id = ${req.id} and k.org_id = ${principal.orgId} and k.revoked_at is null and u.id = k.user_id
            and (k.user_id = ${principal.userId} or ${ADMINS.includes(principal.role as Role)})
          returning k.key_hash, k.name, u.email`;
        if (rows.length === 0) throw new NotFoundError("no such API key");
        await insertAuditEvent(tx, principal.orgId, AUDIT.apiKeyRevoked, principal.email, { id: req.id, name: rows[0]!.name, owner: rows[0]!.email });
        await writeCredentialChanged(outbox, tx, principal.orgId, "api_key", rows[0]!.key_hash);
      });
      outbox.poke();
      return {};
    },
  };
}
