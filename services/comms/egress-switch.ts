import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import { AUDIT_KINDS, type CommsDeps } from "./deps.js";
import type { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";

/**
 * The per-organization switch, which covers every chat connection of the organization, and the
 * organization's comms settings (a second person must approve).
 */
export function createEgressSwitchHandlers(
  deps: CommsDeps,
): Pick<ServiceImpl<typeof CommsService>, "setEgress" | "getEgress" | "egressEnabled" | "getCommsSettings" | "setCommsSettings"> {
  const { store, clients, outbox } = deps;
  return {
    async setEgress(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      await store.setEgress(principal.orgId, req.enabled, principal.email, (previous) => ({
        orgId: principal.orgId,
        kind: AUDIT_KINDS.egressSwitched,
        actor: principal.email,
        data: { enabled: req.enabled, previous },
      }));
      outbox.poke();
      return { enabled: req.enabled };
    },

    async getEgress(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return { enabled: await store.egressEnabled(principal.orgId) };
    },

    async getCommsSettings(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ANY_MEMBER);
      return { requireSecondApprover: await store.requireSecondApprover(principal.orgId) };
    },

    async setCommsSettings(req, context: HandlerContext) {
      const principal = await authorize(clients, context, req.org, ADMINS);
      await store.setRequireSecondApprover(principal.orgId, req.requireSecondApprover, principal.email, (previous) => ({
        orgId: principal.orgId,
        kind: AUDIT_KINDS.approvalChanged,
        actor: principal.email,
        data: { requireSecondApprover: req.requireSecondApprover, previous },
      }));
      outbox.poke();
      return { requireSecondApprover: req.requireSecondApprover };
    },

    // Internal (no route): the caller is another service, which already holds the organization's id.
    async egressEnabled(req) {
      return { enabled: await store.egressEnabled(req.orgId) };
    },
  };
}
