import { randomBytes } from "node:crypto";
import { isUuid } from "../runtime/ids.js";
import { decodeCursor, encodeCursor, pageLimit, pageOf } from "../runtime/page-cursor.js";
import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter, HandlerContext } from "@connectrpc/connect";
import { CredentialChangedSchema } from "../../gen/warroom/events/v1/events_pb.js";
import { IdentityService, type Principal } from "../../gen/warroom/identity/v1/identity_pb.js";
import { ADMINS, ANY_MEMBER, authorize, bearerToken, type Role } from "../runtime/auth.js";
import type { TransactionSql } from "../runtime/database.js";
import { EVENTS, onEvent } from "../runtime/events.js";
import { AlreadyExistsError, InvalidArgumentError, NotFoundError, PermissionDeniedError, RateLimitedError, UnauthenticatedError } from "../runtime/errors.js";
import { INGEST_TOKEN_REVOKED, INVALID_INGEST_TOKEN } from "../runtime/ingest-token-cache.js";
import { newHexSecret, sha256 } from "../runtime/secrets.js";
import type { ServiceContext, ServiceModule } from "../runtime/service-module.js";
import { migrations } from "./migrations.js";
import { createLoginThrottle } from "./login-throttle.js";
import { DUMMY_HASH, hashPassword, needsRehash, verifyPassword } from "./passwords.js";

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const EMAIL = /^[^\s@]+@[^\s@]+$/;
const ROLES: Role[] = ["owner", "admin", "member"];
const CREDENTIAL_KINDS = { ingest: "ingest_token", chat: "chat_secret", alertrouter: "alertrouter_secret" } as const;

export const AUDIT = {
  ingestTokenIssued: "trigger.ingest_token.issued",
  chatSecretIssued: "trigger.chat_secret.issued",
  alertRouterSecretIssued: "trigger.alertrouter_secret.issued",
  apiKeyCreated: "api_key.created",
  apiKeyRevoked: "api_key.revoked",
  memberAdded: "member.added",
  receiverAuthFailed: "receiver.auth_failed",
  organizationCreated: "organization.created",
} as const;

/**
 * The identity service module: organizations, members, sessions, API keys, ingest tokens and
 * receiver secrets, and the audit log other services write to.
 */
export function createIdentityService(ctx: ServiceContext): ServiceModule {
  const { sql, config, outbox, clients } = ctx;
  const throttle = createLoginThrottle(sql);

  async function audit(tx: TransactionSql, orgId: string | null, kind: string, actor: string, data: JsonObject = {}): Promise<void> {
    await tx`insert into identity.audit_events (org_id, kind, actor, data) values (${orgId}, ${kind}, ${actor}, ${sql.json(data as never)})`;
  }

  async function credentialChanged(tx: TransactionSql, orgId: string, kind: string, revokedHash?: Buffer): Promise<void> {
    await outbox.write(tx, EVENTS.credentialChanged, create(CredentialChangedSchema, { orgId, kind, revokedHash: revokedHash?.toString("hex") ?? "" }));
  }

  function actorOf(p: Principal): string {
    return p.email;
  }

  async function orgBySlug(slug: string): Promise<{ id: string; slug: string } | undefined> {
    const [row] = await sql<{ id: string; slug: string }[]>`select id, slug from identity.organizations where slug = ${slug}`;
    return row;
  }

  async function bootstrap(orgSlug: string, email: string, password: string): Promise<{ id: string; slug: string; created: boolean }> {
    if (!SLUG.test(orgSlug)) throw new InvalidArgumentError("orgSlug must be lowercase letters, digits and dashes (1-63 characters)");
    if (!EMAIL.test(email)) throw new InvalidArgumentError("ownerEmail must be an email address");
    if (password.length < 8) throw new InvalidArgumentError("ownerPassword must be at least 8 characters");
    const passwordHash = await hashPassword(password);
    return sql.begin(async (tx) => {
      // Replicas starting together race here; the advisory lock makes one of them do the work.
      await tx`select pg_advisory_xact_lock(hashtext(${`bootstrap:${orgSlug}`}))`;
      const [existing] = await tx<{ id: string; slug: string }[]>`select id, slug from identity.organizations where slug = ${orgSlug}`;
      if (existing) return { ...existing, created: false };
      const [org] = await tx<{ id: string; slug: string }[]>`insert into identity.organizations (slug) values (${orgSlug}) returning id, slug`;
      const [user] = await tx<{ id: string }[]>`
        insert into identity.users (email) values (${email})
        on conflict (lower(email)) do update set email = identity.users.email
        returning id`;
      await tx`insert into identity.memberships (org_id, user_id, role, password_hash) values (${org!.id}, ${user!.id}, 'owner', ${passwordHash})`;
      await audit(tx, org!.id, AUDIT.organizationCreated, "bootstrap", { owner: email });
      return { ...org!, created: true };
    });
  }

  async function issueOrgCredential(
    context: HandlerContext,
    org: string,
    kind: (typeof CREDENTIAL_KINDS)[keyof typeof CREDENTIAL_KINDS],
    allowed: readonly Role[],
    auditKind: string,
  ): Promise<string> {
    const principal = await authorize(clients, context, org, allowed);
    const value = newHexSecret();
    const hash = sha256(value);
    const previous = await sql.begin(async (tx) => {
      const [row] = await tx<{ hash: Buffer }[]>`select hash from identity.org_credentials where org_id = ${principal.orgId} and kind = ${kind} for update`;
      await tx`
        insert into identity.org_credentials (org_id, kind, hash, issued_by) values (${principal.orgId}, ${kind}, ${hash}, ${principal.userId})
        on conflict (org_id, kind) do update set hash = excluded.hash, issued_at = now(), issued_by = excluded.issued_by`;
      await audit(tx, principal.orgId, auditKind, actorOf(principal), { replaced: row !== undefined });
      await credentialChanged(tx, principal.orgId, kind, row?.hash);
      return row?.hash;
    });
    outbox.poke();
    // Before the new value is handed out, every process that cached the old one drops it.
    if (previous && kind === CREDENTIAL_KINDS.ingest) await ctx.broadcast.publish(INGEST_TOKEN_REVOKED, previous.toString("hex"));
    return value;
  }

  async function resolveOrgCredential(kind: string, value: string): Promise<{ id: string; slug: string } | undefined> {
    if (!/^[0-9a-f]{64}$/.test(value)) return undefined;
    const [row] = await sql<{ id: string; slug: string }[]>`
      select o.id, o.slug from identity.org_credentials c join identity.organizations o on o.id = c.org_id
      where c.hash = ${sha256(value)} and c.kind = ${kind}`;
    return row;
  }

  const impl = {
    async login(req: { email: string; password: string; orgSlug: string }, context: HandlerContext) {
      const address = context.requestHeader.get("x-forwarded-for") ?? "";
      const wait = await throttle.lockedFor(req.orgSlug, req.email, address);
      if (wait > 0) throw new RateLimitedError("too many failed logins; try again later", wait);
      // The password is the membership's: (organization, email) names it.
      const [row] = await sql<{ user_id: string; password_hash: string; org_id: string }[]>`
        select m.user_id, m.password_hash, m.org_id
        from identity.memberships m
        join identity.organizations o on o.id = m.org_id
        join identity.users u on u.id = m.user_id
        where o.slug = ${req.orgSlug} and lower(u.email) = lower(${req.email})`;
      // Same work and the same answer whichever part is wrong.
      const passwordOk = await verifyPassword(req.password, row?.password_hash ?? DUMMY_HASH);
      if (!row || !passwordOk) {
        await throttle.failed(req.orgSlug, req.email, address);
        throw new UnauthenticatedError("invalid email, password or organization");
      }
      await throttle.succeeded(req.orgSlug, req.email);
      if (needsRehash(row.password_hash)) {
        // Made with older parameters: replaced now that the password is known, unless it changed meanwhile.
        const upgraded = await hashPassword(req.password);
        await sql`update identity.memberships set password_hash = ${upgraded}
                  where org_id = ${row.org_id} and user_id = ${row.user_id} and password_hash = ${row.password_hash}`;
      }
      const token = `wrs_${randomBytes(32).toString("hex")}`;
      const expiresAt = new Date(Date.now() + config.SESSION_TTL_SECONDS * 1000);
      await sql`insert into identity.sessions (token_hash, org_id, user_id, expires_at) values (${sha256(token)}, ${row.org_id}, ${row.user_id}, ${expiresAt})`;
      return { accessToken: token, expiresAt: timestampFromDate(expiresAt) };
    },

    async logout(_req: unknown, context: HandlerContext) {
      const token = bearerToken(context.requestHeader.get("authorization"));
      if (!token) throw new UnauthenticatedError();
      await sql.begin(async (tx) => {
        const rows = await tx<{ org_id: string; token_hash: Buffer }[]>`
          update identity.sessions set revoked_at = now() where token_hash = ${sha256(token)} and revoked_at is null returning org_id, token_hash`;
        // Live streams opened with this session end at once (services/console/live-events.ts).
        if (rows[0]) await credentialChanged(tx, rows[0].org_id, "session", rows[0].token_hash);
      });
      outbox.poke();
      return {};
    },

    async authenticate(req: { org: string }, context: HandlerContext) {
      const token = bearerToken(context.requestHeader.get("authorization"));
      if (!token) throw new UnauthenticatedError("missing credential: send Authorization: Bearer <session token or API key>");
      const hash = sha256(token);
      const [row] = await sql<{ org_id: string; org_slug: string; user_id: string; email: string; role: string; credential: string }[]>`
        select o.id as org_id, o.slug as org_slug, u.id as user_id, u.email, m.role, c.credential
        from (
          select org_id, user_id, 'session' as credential from identity.sessions
            where token_hash = ${hash} and revoked_at is null and expires_at > now()
          union all
          select org_id, user_id, 'api_key' from identity.api_keys where key_hash = ${hash} and revoked_at is null
        ) c
        join identity.organizations o on o.id = c.org_id
        join identity.users u on u.id = c.user_id
        join identity.memberships m on m.org_id = c.org_id and m.user_id = c.user_id
        limit 1`;
      if (!row) throw new UnauthenticatedError("invalid or expired credential");
      if (row.org_slug !== req.org) throw new PermissionDeniedError("this credential does not act on that organization");
      return { orgId: row.org_id, orgSlug: row.org_slug, userId: row.user_id, email: row.email, role: row.role, credential: row.credential };
    },

    async addMember(req: { org: string; email: string; password: string; role: string }, context: HandlerContext) {
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
      if (req.password.length < 8) throw new InvalidArgumentError("password must be at least 8 characters");
      const passwordHash = await hashPassword(req.password);
      return sql.begin(async (tx) => {
        const [user] = await tx<{ id: string }[]>`
          insert into identity.users (email) values (${req.email})
          on conflict (lower(email)) do update set email = identity.users.email returning id`;
        const inserted = await tx`
          insert into identity.memberships (org_id, user_id, role, password_hash) values (${principal.orgId}, ${user!.id}, ${role}, ${passwordHash})
          on conflict do nothing returning user_id`;
        if (inserted.length === 0) throw new AlreadyExistsError(`${req.email} is already a member of ${req.org}`);
        await audit(tx, principal.orgId, AUDIT.memberAdded, actorOf(principal), { email: req.email, role });
        return { id: user!.id, email: req.email, role };
      });
    },

    async listMembers(req: { org: string; limit: number; cursor: string }, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const limit = pageLimit(req.limit, 1000, 1000);
      const after = req.cursor ? decodeCursor("m", req.cursor, isUuid) : undefined;
      const afterClause =
        after === undefined
          ? sql``
          : sql`and (m.created_at, m.user_id) > (select created_at, user_id from identity.memberships where org_id = ${principal.orgId} and user_id = ${after})`;
      const rows = await sql<{ id: string; email: string; role: string }[]>`
        select u.id, u.email, m.role from identity.memberships m join identity.users u on u.id = m.user_id
        where m.org_id = ${principal.orgId} ${afterClause} order by m.created_at, m.user_id limit ${limit + 1}`;
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("m", last.id));
      return { members: page.map((r) => ({ id: r.id, email: r.email, role: r.role })), ...(nextCursor ? { nextCursor } : {}) };
    },

    async createApiKey(req: { org: string; name: string }, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      const name = req.name.trim() || "api key";
      if (name.length > 100) throw new InvalidArgumentError("name must be at most 100 characters");
      const key = `wrk_${randomBytes(32).toString("hex")}`;
      const id = await sql.begin(async (tx) => {
        const [row] = await tx<{ id: string }[]>`
          insert into identity.api_keys (key_hash, org_id, user_id, name) values (${sha256(key)}, ${principal.orgId}, ${principal.userId}, ${name}) returning id`;
        await audit(tx, principal.orgId, AUDIT.apiKeyCreated, actorOf(principal), { id: row!.id, name });
        return row!.id;
      });
      return { id, key };
    },

    async deleteApiKey(req: { org: string; id: string }, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      if (!/^[0-9a-f-]{36}$/i.test(req.id)) throw new NotFoundError("no such API key");
      await sql.begin(async (tx) => {
        // A member revokes their own keys; an admin may revoke any key of the organization.
        const rows = await tx<{ key_hash: Buffer }[]>`
          update identity.api_keys set revoked_at = now()
          where id = ${req.id} and org_id = ${principal.orgId} and revoked_at is null
            and (user_id = ${principal.userId} or ${ADMINS.includes(principal.role as Role)})
          returning key_hash`;
        if (rows.length === 0) throw new NotFoundError("no such API key");
        await audit(tx, principal.orgId, AUDIT.apiKeyRevoked, actorOf(principal), { id: req.id });
        await credentialChanged(tx, principal.orgId, "api_key", rows[0]!.key_hash);
      });
      outbox.poke();
      return {};
    },

    async issueIngestToken(req: { org: string }, context: HandlerContext) {
      return { token: await issueOrgCredential(context, req.org, CREDENTIAL_KINDS.ingest, ADMINS, AUDIT.ingestTokenIssued) };
    },

    async issueChatSecret(req: { org: string }, context: HandlerContext) {
      return { secret: await issueOrgCredential(context, req.org, CREDENTIAL_KINDS.chat, ADMINS, AUDIT.chatSecretIssued) };
    },

    async issueAlertRouterSecret(req: { org: string }, context: HandlerContext) {
      return { secret: await issueOrgCredential(context, req.org, CREDENTIAL_KINDS.alertrouter, ADMINS, AUDIT.alertRouterSecretIssued) };
    },

    async listAuditEvents(req: { org: string; limit: number; cursor: string }, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      const limit = Math.min(Math.max(req.limit || 100, 1), 1000);
      const after = req.cursor ? decodeCursor("a", req.cursor, (v) => /^\d{1,19}$/.test(v)) : undefined;
      const afterClause =
        after === undefined
          ? sql``
          : sql`and (at, id) < (select at, id from identity.audit_events where org_id = ${principal.orgId} and id = ${after}::bigint)`;
      const rows = await sql<{ id: string; kind: string; actor: string; at: Date; data: JsonObject }[]>`
        select id, kind, actor, at, data from identity.audit_events where org_id = ${principal.orgId} ${afterClause}
        order by at desc, id desc limit ${limit + 1}`;
      const { page, nextCursor } = pageOf(rows, limit, (last) => encodeCursor("a", String(last.id)));
      return { events: page.map((r) => ({ kind: r.kind, actor: r.actor, at: timestampFromDate(r.at), data: r.data })), ...(nextCursor ? { nextCursor } : {}) };
    },

    async resolveIngestToken(req: { token: string }, context: HandlerContext) {
      // The token rides in the Authorization header (redacted from logs); the body field is read
      // only from callers older than that.
      const token = bearerToken(context.requestHeader.get("authorization")) ?? req.token;
      const org = await resolveOrgCredential(CREDENTIAL_KINDS.ingest, token);
      if (!org) throw new UnauthenticatedError(INVALID_INGEST_TOKEN);
      return org;
    },

    async resolveReceiverSecret(req: { kind: string; secret: string; orgSlug: string }, context: HandlerContext) {
      const kind = req.kind === "chat" ? CREDENTIAL_KINDS.chat : req.kind === "alertrouter" ? CREDENTIAL_KINDS.alertrouter : undefined;
      if (!kind) throw new InvalidArgumentError("kind must be chat or alertrouter");
      // The secret rides in the receiver's own header, as the sender sent it; the body field is read
      // only from callers older than that.
      const secret = context.requestHeader.get(`x-service-${req.kind}-secret`) || req.secret;
      const org = secret ? await resolveOrgCredential(kind, secret) : undefined;
      let reason: string | undefined;
      if (!secret) reason = "secret missing";
      else if (!org) reason = "secret wrong";
      else if (req.orgSlug && org.slug !== req.orgSlug) reason = "slug is not the secret's organization";
      if (reason) {
        // The caller gets a uniform 401; the reason is kept for the organization's admins.
        const target = req.orgSlug ? await orgBySlug(req.orgSlug) : org;
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

    async getOrganization(req: { slug: string; id: string }) {
      const [row] = req.id
        ? await sql<{ id: string; slug: string }[]>`select id, slug from identity.organizations where id::text = ${req.id}`
        : await sql<{ id: string; slug: string }[]>`select id, slug from identity.organizations where slug = ${req.slug}`;
      if (!row) throw new NotFoundError("no such organization");
      return row;
    },

    async bootstrap(req: { orgSlug: string; ownerEmail: string; ownerPassword: string }) {
      const org = await bootstrap(req.orgSlug, req.ownerEmail, req.ownerPassword);
      return { organization: { id: org.id, slug: org.slug }, created: org.created };
    },

    async recordAudit(req: { orgId: string; kind: string; actor: string; data?: JsonObject }) {
      await sql.begin((tx) => audit(tx, req.orgId || null, req.kind, req.actor, req.data ?? {}));
      return {};
    },
  };

  return {
    name: "identity",
    migrations,
    services: [IdentityService],
    register(router: ConnectRouter) {
      router.service(IdentityService, impl as never);
    },
    async start() {
      if (config.BOOTSTRAP_ORG_SLUG && config.BOOTSTRAP_OWNER_EMAIL && config.BOOTSTRAP_OWNER_PASSWORD) {
        const org = await bootstrap(config.BOOTSTRAP_ORG_SLUG, config.BOOTSTRAP_OWNER_EMAIL, config.BOOTSTRAP_OWNER_PASSWORD);
        ctx.logger.info({ org: org.slug, created: org.created }, "bootstrap organization");
      }
      // Audit records other services write to their outboxes, stored once each.
      await onEvent(
        ctx.events,
        EVENTS.auditRecorded,
        async (record, event) => {
          // On the request pool, not the background one: in one process this runs inside the
          // relay's publish, which holds a background connection meanwhile (see ServiceContext).
          await sql`
            insert into identity.audit_events (org_id, kind, actor, at, data, source_event_id)
            values (${record.orgId || null}, ${record.kind}, ${record.actor}, ${record.at ? new Date(Number(record.at.seconds) * 1000) : new Date()},
                    ${sql.json((record.data ?? {}) as never)}, ${event.id})
            on conflict (source_event_id) do nothing`;
        },
        { durableName: "identity-audit" },
      );
    },
  };
}
