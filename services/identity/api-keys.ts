import { randomBytes } from "node:crypto";
import type { ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, ANY_MEMBER, authorize, type Role } from "../runtime/auth.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import { sha256 } from "../runtime/secrets.js";
import type { IdentityDeps } from "./deps.js";
import { type ApiKeyRow, AUDIT, insertAuditEvent, type RevokedApiKeyRow, writeCredentialChanged } from "./store.js";

/** API keys: a member's long-lived credential, created and revoked. */
export function createApiKeyHandlers(
  deps: Pick<IdentityDeps, "sql" | "clients" | "outbox">,
): Pick<ServiceImpl<typeof IdentityService>, "createApiKey" | "deleteApiKey"> {
  const { sql, clients, outbox } = deps;
  return {
    async createApiKey(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const name = req.name.trim() || "api key";
      if (name.length > 100) throw new InvalidArgumentError("name must be at most 100 characters");
      const key = `wrk_${randomBytes(32).toString("hex")}`;
      const id = await sql.begin(async (tx) => {
        const [row] = await tx<ApiKeyRow[]>`
          insert into identity.api_keys (key_hash, org_id, user_id, name) values (${sha256(key)}, ${principal.orgId}, ${principal.userId}, ${name}) returning id`;
        await insertAuditEvent(tx, principal.orgId, AUDIT.apiKeyCreated, principal.email, { id: row!.id, name });
        return row!.id;
      });
      return { id, key };
    },

    async deleteApiKey(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (!/^[0-9a-f-]{36}$/i.test(req.id)) throw new NotFoundError("no such API key");
      await sql.begin(async (tx) => {
        // A member revokes their own keys; an admin may revoke any key of the organization.
        const rows = await tx<RevokedApiKeyRow[]>`
          update identity.api_keys set revoked_at = now()
          where id = ${req.id} and org_id = ${principal.orgId} and revoked_at is null
            and (user_id = ${principal.userId} or ${ADMINS.includes(principal.role as Role)})
          returning key_hash`;
        if (rows.length === 0) throw new NotFoundError("no such API key");
        await insertAuditEvent(tx, principal.orgId, AUDIT.apiKeyRevoked, principal.email, { id: req.id });
        await writeCredentialChanged(outbox, tx, principal.orgId, "api_key", rows[0]!.key_hash);
      });
      outbox.poke();
      return {};
    },
  };
}
