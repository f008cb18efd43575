import type { ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { Sql } from "../runtime/data/database.js";
import { InvalidArgumentError, NotFoundError } from "../runtime/errors.js";
import type { IdentityDeps } from "./deps.js";
import { EMAIL, MIN_PASSWORD_LENGTH } from "./members.js";
import { hashPassword } from "./passwords.js";
import { AUDIT, insertAuditEvent, type OrganizationRow, organizationBySlug, type UserRow } from "./store.js";

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Methods only other services call: organizations by slug or id, and the first organization. */
export function createInternalHandlers(deps: Pick<IdentityDeps, "sql">): Pick<ServiceImpl<typeof IdentityService>, "getOrganization" | "bootstrap"> {
  const { sql } = deps;
  return {
    async getOrganization(req) {
      const row = req.id ? await organizationById(sql, req.id) : await organizationBySlug(sql, req.slug);
      if (!row) throw new NotFoundError("no such organization");
      return row;
    },

    async bootstrap(req) {
      const org = await bootstrapOrganization(sql, req.orgSlug, req.ownerEmail, req.ownerPassword);
      return { organization: { id: org.id, slug: org.slug }, created: org.created };
    },
  };
}

async function organizationById(sql: Sql, id: string): Promise<OrganizationRow | undefined> {
  const [row] = await sql<OrganizationRow[]>`select id, slug from identity.organizations where id::text = ${id}`;
  return row;
}

/** Creates the organization and its owner, unless an organization with that slug exists. */
export async function bootstrapOrganization(sql: Sql, orgSlug: string, email: string, password: string): Promise<OrganizationRow & { created: boolean }> {
  if (!SLUG.test(orgSlug)) throw new InvalidArgumentError("orgSlug must be lowercase letters, digits and dashes (1-63 characters)");
  if (!EMAIL.test(email)) throw new InvalidArgumentError("ownerEmail must be an email address");
  if (password.length < MIN_PASSWORD_LENGTH) throw new InvalidArgumentError(`ownerPassword must be at least ${MIN_PASSWORD_LENGTH} characters`);
  const passwordHash = await hashPassword(password);
  return sql.begin(async (tx) => {
    // Replicas starting together race here; the advisory lock makes one of them do the work.
    await tx`select pg_advisory_xact_lock(hashtext(${`bootstrap:${orgSlug}`}))`;
    const existing = await organizationBySlug(tx, orgSlug);
    if (existing) return { ...existing, created: false };
    const [org] = await tx<OrganizationRow[]>`insert into identity.organizations (slug) values (${orgSlug}) returning id, slug`;
    const [user] = await tx<UserRow[]>`
      insert into identity.users (email) values (${email})
      on conflict (lower(email)) do update set email = identity.users.email
      returning id`;
    await tx`insert into identity.memberships (org_id, user_id, role, password_hash) values (${org!.id}, ${user!.id}, 'owner', ${passwordHash})`;
    await insertAuditEvent(tx, org!.id, AUDIT.organizationCreated, "bootstrap", { owner: email });
    return { ...org!, created: true };
  });
}
