import { randomBytes } from "node:crypto";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { bearerToken } from "../runtime/credentials/auth.js";
import { PermissionDeniedError, RateLimitedError, UnauthenticatedError } from "../runtime/errors.js";
import { sha256 } from "../runtime/credentials/secrets.js";
import type { IdentityDeps } from "./deps.js";
import { accountKey, type createLoginThrottle } from "./login-throttle.js";
import { dummyHash, HashQueueFullError, type HashShare, hashPassword, hashQueueAdmits, needsRehash, verifyPassword } from "./passwords.js";
import { type LoginRow, type PrincipalRow, type RevokedSessionRow, writeCredentialChanged } from "./store.js";

/**
 * The login's share of the hashing queue, with its evidence (a known address); refused at once
 * (429, no failure reserved) when the queue would not take it, so a flood refused for capacity costs
 * one read.
 */
export async function hashShare(
  throttle: ReturnType<typeof createLoginThrottle>,
  org: string,
  email: string,
  address: string,
  timeoutMs: number | undefined,
): Promise<HashShare> {
  // The caller's deadline, counted from now: a hash that could not end by it is refused at once.
  const deadlineAt = timeoutMs === undefined ? undefined : performance.now() + timeoutMs;
  const share = { account: accountKey(org, email), address, known: await throttle.isKnown(org, email, address), deadlineAt };
  if (!hashQueueAdmits(share)) throw new HashQueueFullError();
  return share;
}

/**
 * The password check of an attempt whose failure `throttle.reserve` reserved; refused for capacity
 * by the hashing queue, the attempt was not checked and gives its reservation back (429 all the same).
 */
export async function checkedOrReleased(
  throttle: ReturnType<typeof createLoginThrottle>,
  org: string,
  email: string,
  address: string,
  check: () => Promise<boolean>,
): Promise<boolean> {
  try {
    return await check();
  } catch (err) {
    if (err instanceof HashQueueFullError) await throttle.release(org, email, address);
    throw err;
  }
}

/** Sessions: logging in and out, and who a session token or API key stands for. */
export function createSessionHandlers(
  deps: Pick<IdentityDeps, "sql" | "config" | "outbox" | "throttle">,
): Pick<ServiceImpl<typeof IdentityService>, "login" | "logout" | "authenticate"> {
  const { sql, config, outbox, throttle } = deps;
  // Keys whose last-use write is under way in this process: a burst of calls with one key starts one.
  const lastUseWrites = new Set<string>();

  /**
   * Records an API key's use, at most once a minute per key across every replica (the condition
   * is checked again under the row lock), after the answer and off its path: a failed or slow
   * write never delays or fails the call.
   */
  function noteKeyUse(keyId: string): void {
    if (lastUseWrites.has(keyId)) return;
    lastUseWrites.add(keyId);
    void sql`update identity.api_keys set last_used_at = now()
             where id = ${keyId} and (last_used_at is null or last_used_at < now() - interval '1 minute')`
      .catch(() => {})
      .finally(() => lastUseWrites.delete(keyId));
  }

  return {
    async login(req, context) {
      const address = context.requestHeader.get("x-forwarded-for") ?? "";
      const share = await hashShare(throttle, req.orgSlug, req.email, address, context.timeoutMs());
      // The failure is reserved before the hash, so concurrent guesses cannot pass the limit.
      const wait = await throttle.reserve(req.orgSlug, req.email, address, share.known);
      if (wait > 0) throw new RateLimitedError("too many failed logins; try again later", wait);
      // The password is the membership's: (organization, email) names it.
      const [row] = await sql<LoginRow[]>`
        select m.user_id, m.password_hash, m.org_id
        from identity.memberships m
        join identity.organizations o on o.id = m.org_id
        join identity.users u on u.id = m.user_id
        where o.slug = ${req.orgSlug} and lower(u.email) = lower(${req.email})`;
      // Same work and the same answer whichever part is wrong.
      const passwordOk = await checkedOrReleased(throttle, req.orgSlug, req.email, address, async () =>
        verifyPassword(req.password, row?.password_hash ?? (await dummyHash()), share),
      );
      if (!row || !passwordOk) {
        await throttle.failed(req.orgSlug, req.email, address);
        throw new UnauthenticatedError("invalid email, password or organization");
      }
      await throttle.succeeded(req.orgSlug, req.email, address);
      const checked = [row.password_hash];
      if (needsRehash(row.password_hash)) {
        // Made with older parameters: replaced now that the password is known, unless it changed meanwhile.
        const upgraded = await hashPassword(req.password, share);
        await sql`update identity.memberships set password_hash = ${upgraded}
                  where org_id = ${row.org_id} and user_id = ${row.user_id} and password_hash = ${row.password_hash}`;
        checked.push(upgraded);
      }
      const token = `wrs_${randomBytes(32).toString("hex")}`;
      const expiresAt = new Date(Date.now() + config.SESSION_TTL_SECONDS * 1000);
      // Only while the membership still exists with the password just checked, under a share lock
      // on it: a removal or a password change that committed meanwhile leaves no session behind
      // (it would outlive the revocation), and one in progress waits for this one and revokes it.
      const inserted = await sql`
        insert into identity.sessions (token_hash, org_id, user_id, expires_at)
        select ${sha256(token)}, m.org_id, m.user_id, ${expiresAt} from identity.memberships m
        where m.org_id = ${row.org_id} and m.user_id = ${row.user_id} and m.password_hash in ${sql(checked)}
        for share
        returning id`;
      if (inserted.length === 0) throw new UnauthenticatedError("invalid email, password or organization");
      return { accessToken: token, expiresAt: timestampFromDate(expiresAt) };
    },

    async logout(_req, context) {
      const token = bearerToken(context.requestHeader.get("authorization"));
      if (!token) throw new UnauthenticatedError();
      await sql.begin(async (tx) => {
        const rows = await tx<RevokedSessionRow[]>`
          update identity.sessions set revoked_at = now() where token_hash = ${sha256(token)} and revoked_at is null returning org_id, token_hash`;
        // Live streams opened with this session end at once (services/console/live-events.ts).
        if (rows[0]) await writeCredentialChanged(outbox, tx, rows[0].org_id, "session", rows[0].token_hash);
      });
      outbox.poke();
      return {};
    },

    async authenticate(req, context) {
      const token = bearerToken(context.requestHeader.get("authorization"));
      if (!token) throw new UnauthenticatedError("missing credential: send Authorization: Bearer <session token or API key>");
      const hash = sha256(token);
      const [row] = await sql<PrincipalRow[]>`
        select o.id as org_id, o.slug as org_slug, u.id as user_id, u.email, m.role, c.credential, c.key_id, c.use_unrecorded
        from (
          select org_id, user_id, 'session' as credential, null::uuid as key_id, false as use_unrecorded from identity.sessions
            where token_hash = ${hash} and revoked_at is null and expires_at > now()
          union all
          select org_id, user_id, 'api_key', id, (last_used_at is null or last_used_at < now() - interval '1 minute')
            from identity.api_keys where key_hash = ${hash} and revoked_at is null
        ) c
        join identity.organizations o on o.id = c.org_id
        join identity.users u on u.id = c.user_id
        join identity.memberships m on m.org_id = c.org_id and m.user_id = c.user_id
        limit 1`;
      if (!row) throw new UnauthenticatedError("invalid or expired credential");
      if (row.org_slug !== req.org) throw new PermissionDeniedError("this credential does not act on that organization");
      if (row.key_id && row.use_unrecorded) noteKeyUse(row.key_id);
      return { orgId: row.org_id, orgSlug: row.org_slug, userId: row.user_id, email: row.email, role: row.role, credential: row.credential };
    },
  };
}
