import { create, type JsonObject } from "@bufbuild/protobuf";
import { type AuditRecorded, CredentialChangedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import type { Principal } from "../../gen/warroom/identity/v1/identity_pb.js";
import type { Role } from "../runtime/credentials/auth.js";
import type { Sql, TransactionSql } from "../runtime/data/database.js";
import { PermissionDeniedError, UnauthenticatedError } from "../runtime/errors.js";
import { EVENTS } from "../runtime/transport/events.js";
import type { Outbox } from "../runtime/data/outbox.js";

/** The identity schema's rows, as the handlers read them. */
export interface OrganizationRow {
  id: string;
  slug: string;
}

export interface UserRow {
  id: string;
}

/** A membership found by organization slug and email, for a login. */
export interface LoginRow {
  user_id: string;
  password_hash: string;
  org_id: string;
}

/** The principal a session token or API key stands for. */
export interface PrincipalRow {
  org_id: string;
  org_slug: string;
  user_id: string;
  email: string;
  role: string;
  credential: string;
  /** The API key's id, and whether its last use is more than a minute old; null for a session. */
  key_id: string | null;
  use_unrecorded: boolean;
}

export interface RevokedSessionRow {
  org_id: string;
  token_hash: Buffer;
}

export interface RevokedApiKeyRow {
  key_hash: Buffer;
}

export interface ApiKeyRow {
  id: string;
}

export interface ApiKeyListRow {
  id: string;
  name: string;
  email: string;
  created_at: Date;
  last_used_at: Date | null;
}

export interface MembershipRow {
  user_id: string;
  email: string;
  role: string;
  password_hash: string;
}

export interface RevokedCredentialRow {
  kind: "session" | "api_key";
  hash: Buffer;
}

export interface MemberRow {
  id: string;
  email: string;
  role: string;
}

export interface OrgCredentialRow {
  hash: Buffer;
}

export interface AuditEventRow {
  id: string;
  kind: string;
  actor: string;
  at: Date;
  data: JsonObject;
}

export const CREDENTIAL_KINDS = { ingest: "ingest_token", chat: "chat_secret", alertrouter: "alertrouter_secret" } as const;
export type CredentialKind = (typeof CREDENTIAL_KINDS)[keyof typeof CREDENTIAL_KINDS];

export const AUDIT = {
  ingestTokenIssued: "trigger.ingest_token.issued",
  chatSecretIssued: "trigger.chat_secret.issued",
  alertRouterSecretIssued: "trigger.alertrouter_secret.issued",
  apiKeyCreated: "api_key.created",
  apiKeyRevoked: "api_key.revoked",
  memberAdded: "member.added",
  memberRemoved: "member.removed",
  memberRoleChanged: "member.role_changed",
  memberPasswordSet: "member.password_set",
  receiverAuthFailed: "receiver.auth_failed",
  organizationCreated: "organization.created",
} as const;

export async function insertAuditEvent(tx: TransactionSql, orgId: string | null, kind: string, actor: string, data: JsonObject = {}): Promise<void> {
  await tx`insert into identity.audit_events (org_id, kind, actor, data) values (${orgId}, ${kind}, ${actor}, ${tx.json(data)})`;
}

/**
 * The caller's role as it is now, in the write's own transaction, under a share lock on their
 * membership row: the caller was authorized before the transaction began, and a removal or
 * demotion that commits meanwhile would otherwise let their write (a new member, a new secret)
 * grant access they no longer have. A removal in progress holds the row, so this waits for it
 * and then finds no row (401); a removal that starts later waits for this write and sees its result.
 */
export async function lockCaller(tx: TransactionSql, principal: Principal, allowed: readonly Role[]): Promise<void> {
  const [caller] = await tx<{ role: Role }[]>`
    select role from identity.memberships where org_id = ${principal.orgId} and user_id = ${principal.userId} for share`;
  if (!caller) throw new UnauthenticatedError("invalid or expired credential");
  if (!allowed.includes(caller.role)) {
    throw new PermissionDeniedError(`this needs the role ${allowed.filter((r) => r !== "owner").join(" or ") || "owner"}; you are ${caller.role}`);
  }
  principal.role = caller.role;
}

/** Tells every process that a credential changed; with the revoked hash, caches of it drop it. */
export async function writeCredentialChanged(outbox: Outbox, tx: TransactionSql, orgId: string, kind: string, revokedHash?: Buffer): Promise<void> {
  await outbox.write(tx, EVENTS.credentialChanged, create(CredentialChangedSchema, { orgId, kind, revokedHash: revokedHash?.toString("hex") ?? "" }));
}

/**
 * Revokes a membership's live sessions (all but `keepSessionHash`) and, with `apiKeys`, its API
 * keys, in the caller's transaction; writes one credential-changed event per revoked value, so that
 * live streams opened with it end on every replica. Authentication reads these rows on every
 * request, so the next request with any of them is refused once this commits.
 */
export async function revokeMemberCredentials(
  outbox: Outbox,
  tx: TransactionSql,
  orgId: string,
  userId: string,
  options: { apiKeys: boolean; keepSessionHash?: Buffer },
): Promise<RevokedCredentialRow[]> {
  const keep = options.keepSessionHash ?? Buffer.alloc(0);
  const revoked = await tx<RevokedCredentialRow[]>`
    with sessions as (
      update identity.sessions set revoked_at = now()
      where org_id = ${orgId} and user_id = ${userId} and revoked_at is null and expires_at > now() and token_hash <> ${keep}
      returning 'session'::text as kind, token_hash as hash
    ), keys as (
      update identity.api_keys set revoked_at = now()
      where ${options.apiKeys} and org_id = ${orgId} and user_id = ${userId} and revoked_at is null
      returning 'api_key'::text as kind, key_hash as hash
    )
    select kind, hash from sessions union all select kind, hash from keys`;
  for (const row of revoked) await writeCredentialChanged(outbox, tx, orgId, row.kind, row.hash);
  return revoked;
}

export async function organizationBySlug(sql: Sql | TransactionSql, slug: string): Promise<OrganizationRow | undefined> {
  const [row] = await sql<OrganizationRow[]>`select id, slug from identity.organizations where slug = ${slug}`;
  return row;
}

/** Stores an audit record another service published; the event id makes a redelivery a no-op. */
export async function storeRecordedAudit(sql: Sql, record: AuditRecorded, eventId: string): Promise<void> {
  await sql`
    insert into identity.audit_events (org_id, kind, actor, at, data, source_event_id)
    values (${record.orgId || null}, ${record.kind}, ${record.actor}, ${record.at ? new Date(Number(record.at.seconds) * 1000) : new Date()},
            ${sql.json(record.data ?? {})}, ${eventId})
    on conflict (source_event_id) do nothing`;
}
