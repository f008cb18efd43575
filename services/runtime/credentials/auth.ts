import type { HandlerContext } from "@connectrpc/connect";
import type { Principal } from "../../../gen/warroom/identity/v1/identity_pb.js";
import type { Clients } from "../transport/clients.js";
import { PermissionDeniedError, UnauthenticatedError } from "../errors.js";

export type Role = "owner" | "admin" | "member";

/** Roles are nested: an owner may do all an admin may, an admin all a member may. */
export const ANY_MEMBER: readonly Role[] = ["owner", "admin", "member"];
export const ADMINS: readonly Role[] = ["owner", "admin"];
export const OWNERS: readonly Role[] = ["owner"];

/**
 * Resolves the caller's bearer credential (session token or personal API key) to a principal of
 * `org` through the identity service, and checks its role. 401 without a valid credential, 403
 * for a credential of another organization or a role that may not.
 */
export async function authorize(clients: Clients, context: HandlerContext, org: string, allowed: readonly Role[] = ANY_MEMBER): Promise<Principal> {
  const authorization = context.requestHeader.get("authorization");
  if (!authorization) throw new UnauthenticatedError("missing credential: send Authorization: Bearer <session token or API key>");
  const principal = await clients.identity.authenticate(
    { org },
    { headers: { authorization, "x-request-id": context.requestHeader.get("x-request-id") ?? "" }, signal: context.signal },
  );
  if (!allowed.includes(principal.role as Role)) {
    throw new PermissionDeniedError(`this needs the role ${allowed.filter((r) => r !== "owner").join(" or ") || "owner"}; you are ${principal.role}`);
  }
  return principal;
}

/** The bearer value of an Authorization header, or undefined. */
export function bearerToken(authorization: string | null | undefined): string | undefined {
  if (!authorization) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return match?.[1];
}
