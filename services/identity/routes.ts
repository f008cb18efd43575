import type { ServiceImpl } from "@connectrpc/connect";
import type { IdentityService } from "../../gen/warroom/identity/v1/identity_pb.js";
import { createApiKeyHandlers } from "./api-keys.js";
import { createAuditEventHandlers } from "./audit-events.js";
import type { IdentityDeps } from "./deps.js";
import { createInternalHandlers } from "./internal.js";
import { createMemberChangeHandlers } from "./member-changes.js";
import { createMemberHandlers } from "./members.js";
import { createOrgCredentialHandlers } from "./org-credentials.js";
import { createSessionHandlers } from "./sessions.js";

/** Every IdentityService method, from its handler groups. */
export function createIdentityRoutes(deps: IdentityDeps): ServiceImpl<typeof IdentityService> {
  return {
    ...createSessionHandlers(deps),
    ...createMemberHandlers(deps),
    ...createMemberChangeHandlers(deps),
    ...createApiKeyHandlers(deps),
    ...createOrgCredentialHandlers(deps),
    ...createAuditEventHandlers(deps),
    ...createInternalHandlers(deps),
  };
}
