import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { ADMINS, ANY_MEMBER, authorize } from "../runtime/credentials/auth.js";
import type { AuditRecord } from "../runtime/transport/events.js";
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

  /** An admin's change of one organization setting, audited with its previous value. */
  async function setAudited(
    context: HandlerContext,
    org: string,
    kind: string,
    field: string,
    value: boolean,
    save: (orgId: string, value: boolean, changedBy: string, audit: (previous: boolean) => AuditRecord) => Promise<void>,
  ): Promise<void> {
    const principal = await authorize(clients, context, org, ADMINS);
    await save(principal.orgId, value, principal.email, (previous) => ({
      orgId: principal.orgId,
      kind,
      actor: principal.email,
      data: { [field]: value, previous },
    }));
    outbox.poke();
  }

  return {
    async setEgress(req, context: HandlerContext) {
      await setAudited(context, req.org, AUDIT_KINDS.egressSwitched, "enabled", req.enabled, (...args) => store.setEgress(...args));
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
      const value = req.requireSecondApprover;
      await setAudited(context, req.org, AUDIT_KINDS.approvalChanged, "requireSecondApprover", value, (...args) => store.setRequireSecondApprover(...args));
      return { requireSecondApprover: value };
    },

    // Internal (no route): the caller is another service, which already holds the organization's id.
    async egressEnabled(req) {
      return { enabled: await store.egressEnabled(req.orgId) };
    },
  };
}
