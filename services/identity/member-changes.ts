import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { IdentityService, Principal } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, ANY_MEMBER, authorize, bearerToken, type Role } from "../runtime/credentials/auth.js";
import type { TransactionSql } from "../runtime/data/database.js";
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, PermissionDeniedError, RateLimitedError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { sha256 } from "../runtime/credentials/secrets.js";
import type { IdentityDeps } from "./deps.js";
import { MIN_PASSWORD_LENGTH, ROLES } from "./members.js";
import { hashPassword, verifyPassword } from "./passwords.js";
import { checkedOrReleased, hashShare } from "./sessions.js";
import { AUDIT, insertAuditEvent, lockCaller, type MembershipRow, revokeMemberCredentials } from "./store.js";

/** Roles are nested; a caller gives no one a role above their own. */
const RANK: Record<Role, number> = { member: 1, admin: 2, owner: 3 };

export const LAST_OWNER = "an organization needs an owner: make another member owner first";

/**
 * Passwords and API keys change only with a signed-in session: a stolen key that could set its
 * owner's password, or mint a key of its own, would outlive its revocation and lock the person out.
 */
export function requireSession(principal: Principal, org: string): void {
  if (principal.credential !== "session") {
    throw new PermissionDeniedError(
      `changing credentials needs a signed-in session, not an API key: log in, then use PUT /o/${org}/me/password with currentPassword for your own password`,
    );
  }
}

/**
 * What happens to a membership after it is added: a new role, removal, a password set by an
 * admin, a password changed by its holder. Removal and password changes revoke credentials in the
 * same transaction as the change; authentication reads those rows on every request, so every
 * replica refuses them from the next request on.
 */
export function createMemberChangeHandlers(
  deps: Pick<IdentityDeps, "sql" | "clients" | "outbox" | "throttle">,
): Pick<ServiceImpl<typeof IdentityService>, "updateMember" | "removeMember" | "setMemberPassword" | "changeOwnPassword"> {
  const { sql, clients, outbox, throttle } = deps;

  /**
   * The target membership, locked, after the organization row: every change of roles and
   * memberships of one organization takes that lock first, so two owners demoting or removing
   * each other at once cannot both see the other one left.
   */
  async function lockedTarget(tx: TransactionSql, principal: Principal, id: string): Promise<MembershipRow> {
    // `no key update`: it serializes these changes without holding up the foreign-key checks of
    // logins and key creations, which take `key share` on the organization row.
    await tx`select 1 from identity.organizations where id = ${principal.orgId} for no key update`;
    // The caller's role as it is now, under the lock: two admins removing or demoting each other
    // at once were both authorized before either committed, and only the first may go through.
    await lockCaller(tx, principal, ADMINS);
    const [target] = await tx<MembershipRow[]>`
      select m.user_id, u.email, m.role, m.password_hash from identity.memberships m join identity.users u on u.id = m.user_id
      where m.org_id = ${principal.orgId} and m.user_id = ${id} for update of m`;
    if (!target) throw new NotFoundError("no such member");
    return target;
  }

  async function ownerCount(tx: TransactionSql, orgId: string): Promise<number> {
    const [row] = await tx<{ n: number }[]>`select count(*)::int as n from identity.memberships where org_id = ${orgId} and role = 'owner'`;
    return row!.n;
  }

  function mayManage(principal: Principal, target: MembershipRow, action: string): void {
    if (target.role === "owner" && principal.role !== "owner") throw new PermissionDeniedError(`only an owner may ${action} an owner`);
  }

  /** The hash of the session the call is made with, kept when the caller's own sessions end. */
  function currentSessionHash(principal: Principal, context: HandlerContext): Buffer | undefined {
    const token = bearerToken(context.requestHeader.get("authorization"));
    return principal.credential === "session" && token ? sha256(token) : undefined;
  }

  return {
    async updateMember(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      if (!ROLES.includes(req.role as Role)) throw new InvalidArgumentError("role must be owner, admin or member");
      if (!isUuid(req.id)) throw new NotFoundError("no such member");
      const role = req.role as Role;
      const email = await sql.begin(async (tx) => {
        const target = await lockedTarget(tx, principal, req.id);
        mayManage(principal, target, "change the role of");
        if (RANK[role] > RANK[principal.role as Role]) throw new PermissionDeniedError(`you may not give a role above your own (${principal.role})`);
        // Asking for the role the member has changes nothing and records nothing (a retried click).
        if (target.role === role) return target.email;
        if (target.role === "owner" && (await ownerCount(tx, principal.orgId)) === 1) throw new FailedPreconditionError(LAST_OWNER);
        await tx`update identity.memberships set role = ${role} where org_id = ${principal.orgId} and user_id = ${req.id}`;
        await insertAuditEvent(tx, principal.orgId, AUDIT.memberRoleChanged, principal.email, { id: req.id, email: target.email, from: target.role, to: role });
        return target.email;
      });
      return { id: req.id, email, role };
    },

    async removeMember(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      if (!isUuid(req.id)) throw new NotFoundError("no such member");
      await sql.begin(async (tx) => {
        const target = await lockedTarget(tx, principal, req.id);
        mayManage(principal, target, "remove");
        if (target.role === "owner" && (await ownerCount(tx, principal.orgId)) === 1) throw new FailedPreconditionError(LAST_OWNER);
        const revoked = await revokeMemberCredentials(outbox, tx, principal.orgId, req.id, { apiKeys: true });
        await tx`delete from identity.memberships where org_id = ${principal.orgId} and user_id = ${req.id}`;
        await insertAuditEvent(tx, principal.orgId, AUDIT.memberRemoved, principal.email, {
          id: req.id,
          email: target.email,
          role: target.role,
          sessionsRevoked: revoked.filter((r) => r.kind === "session").length,
          apiKeysRevoked: revoked.filter((r) => r.kind === "api_key").length,
        });
      });
      outbox.poke();
      return {};
    },

    async setMemberPassword(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      requireSession(principal, req.org);
      // Without the current password, a stolen session could otherwise take its own account over.
      if (req.id === principal.userId) {
        throw new PermissionDeniedError(`your own password changes only with your current password: use PUT /o/${req.org}/me/password with currentPassword`);
      }
      if (!isUuid(req.id)) throw new NotFoundError("no such member");
      if (req.password.length < MIN_PASSWORD_LENGTH) throw new InvalidArgumentError(`password must be at least ${MIN_PASSWORD_LENGTH} characters`);
      // Hashed before the transaction: no lock is held while the hash queue works.
      const passwordHash = await hashPassword(req.password);
      await sql.begin(async (tx) => {
        const target = await lockedTarget(tx, principal, req.id);
        mayManage(principal, target, "set the password of");
        await tx`update identity.memberships set password_hash = ${passwordHash} where org_id = ${principal.orgId} and user_id = ${req.id}`;
        // Whoever knew the old password is logged out.
        const revoked = await revokeMemberCredentials(outbox, tx, principal.orgId, req.id, { apiKeys: false });
        await insertAuditEvent(tx, principal.orgId, AUDIT.memberPasswordSet, principal.email, {
          id: req.id,
          email: target.email,
          sessionsRevoked: revoked.length,
        });
      });
      outbox.poke();
      return {};
    },

    async changeOwnPassword(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      requireSession(principal, req.org);
      if (req.newPassword.length < MIN_PASSWORD_LENGTH) throw new InvalidArgumentError(`newPassword must be at least ${MIN_PASSWORD_LENGTH} characters`);
      // The current password is checked like a login, under the same throttle: otherwise a stolen
      // session or API key could guess it here unthrottled, then log in and lock the person out.
      const address = context.requestHeader.get("x-forwarded-for") ?? "";
      // The failure is reserved before the hash, so concurrent guesses cannot pass the limit.
      const share = await hashShare(throttle, principal.orgSlug, principal.email, address, context.timeoutMs());
      const wait = await throttle.reserve(principal.orgSlug, principal.email, address, share.known);
      if (wait > 0) throw new RateLimitedError("too many failed logins; try again later", wait);
      const [current] = await sql<MembershipRow[]>`
        select password_hash from identity.memberships where org_id = ${principal.orgId} and user_id = ${principal.userId}`;
      if (!current) {
        await throttle.release(principal.orgSlug, principal.email, address);
        throw new NotFoundError("no such member");
      }
      const ok = await checkedOrReleased(throttle, principal.orgSlug, principal.email, address, () =>
        verifyPassword(req.currentPassword, current.password_hash, share),
      );
      if (!ok) {
        await throttle.failed(principal.orgSlug, principal.email, address);
        throw new PermissionDeniedError("currentPassword is not your current password");
      }
      await throttle.succeeded(principal.orgSlug, principal.email, address);
      const passwordHash = await hashPassword(req.newPassword, share);
      await sql.begin(async (tx) => {
        // Only over the password just checked: a change made meanwhile (by an admin) wins.
        const updated = await tx`
          update identity.memberships set password_hash = ${passwordHash}
          where org_id = ${principal.orgId} and user_id = ${principal.userId} and password_hash = ${current.password_hash} returning user_id`;
        if (updated.length === 0) throw new FailedPreconditionError("your password was changed meanwhile; log in again");
        const revoked = await revokeMemberCredentials(outbox, tx, principal.orgId, principal.userId, {
          apiKeys: false,
          keepSessionHash: currentSessionHash(principal, context),
        });
        await insertAuditEvent(tx, principal.orgId, AUDIT.memberPasswordSet, principal.email, {
          id: principal.userId,
          email: principal.email,
          own: true,
          sessionsRevoked: revoked.length,
        });
      });
      outbox.poke();
      return {};
    },
  };
}
