import type { ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, ANY_MEMBER, authorize, OWNERS, type Role } from "../runtime/credentials/auth.js";
import { AlreadyExistsError, InvalidArgumentError, PermissionDeniedError } from "../runtime/errors.js";
import { isUuid } from "../runtime/ids.js";
import { encodeCursor, pageOf, pageRequest } from "../runtime/data/page-cursor.js";
import type { IdentityDeps } from "./deps.js";
import { hashPassword } from "./passwords.js";
import { AUDIT, insertAuditEvent, lockCaller, type MemberRow, type UserRow } from "./store.js";

export const EMAIL = /^[^\s@]+@[^\s@]+$/;
export const MIN_PASSWORD_LENGTH = 8;
export const ROLES: readonly Role[] = ["owner", "admin", "member"];

/** Members of an organization: adding one with its own password, listing them. */
export function createMemberHandlers(deps: Pick<IdentityDeps, "sql" | "clients">): Pick<ServiceImpl<typeof IdentityService>, "addMember" | "listMembers"> {
  const { sql, clients } = deps;
  return {
    async addMember(req, context) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const role = req.role || "member";
      if (!ROLES.includes(role as Role)) throw new InvalidArgumentError("role must be owner, admin or member");
      if (role === "owner" && principal.role !== "owner") throw new PermissionDeniedError("only an owner may add an owner");
      if (!EMAIL.test(req.email)) throw new InvalidArgumentError("email must be an email address");
      // The password given is this membership's own, whether or not the email belongs to another
      // organization too: the answer, the work done and the checks are the same either way, so an
      // admin learns nothing about other organizations' accounts and sets no password for them.
      const [member] = await sql`
        select 1 from identity.memberships m join identity.users u on u.id = m.user_id
        where m.org_id = ${principal.orgId} and lower(u.email) = lower(${req.email})`;
      if (member) throw new AlreadyExistsError(`${req.email} is already a member of ${req.org}`);
      if (req.password.length < MIN_PASSWORD_LENGTH) throw new InvalidArgumentError(`password must be at least ${MIN_PASSWORD_LENGTH} characters`);
      const passwordHash = await hashPassword(req.password);
      return sql.begin(async (tx) => {
        // Granting access: only while the caller still may, as of this transaction.
        await lockCaller(tx, principal, role === "owner" ? OWNERS : ADMINS);
        const [user] = await tx<UserRow[]>`
          insert into identity.users (email) values (${req.email})
          on conflict (lower(email)) do update set email = identity.users.email returning id`;
        const inserted = await tx`
          insert into identity.memberships (org_id, user_id, role, password_hash) values (${principal.orgId}, ${user!.id}, ${role}, ${passwordHash})
          on conflict do nothing returning user_id`;
        if (inserted.length === 0) throw new AlreadyExistsError(`${req.email} is already a member of ${req.org}`);
        await insertAuditEvent(tx, principal.orgId, AUDIT.memberAdded, principal.email, { email: req.email, role });
        return { id: user!.id, email: req.email, role };
      });
    },

    async listMembers(req, context) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const { limit, after } = pageRequest(req, "m", isUuid, { fallback: 1000, max: 1000 });
      const afterClause =
        after === undefined
          ? sql``
          : sql`and (m.created_at, m.user_id) > (select created_at, user_id from identity.memberships where org_id = ${principal.orgId} and user_id = ${after})`;
      const rows = await sql<MemberRow[]>`
        select u.id, u.email, m.role from identity.memberships m join identity.users u on u.id = m.user_id
        where m.org_id = ${principal.orgId} ${afterClause} order by m.created_at, m.user_id limit ${limit + 1}`;
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("m", last.id));
      return { members: page.map((r) => ({ id: r.id, email: r.email, role: r.role })), ...(nextCursor ? { nextCursor } : {}) };
    },
  };
}
