import type { HandlerContext } from "@connectrpc/connect";
import type { Incident } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { EgressClient } from "../runtime/egress/index.js";
import type { SecretBox } from "../runtime/secret-box.js";
import type { ServiceContext } from "../runtime/service-module.js";

/** What the comms handler groups share; service.ts builds it once. */
export interface CommsDeps extends Pick<ServiceContext, "sql" | "config" | "clients" | "outbox" | "logger"> {
  /** Every chat-webhook call goes through it. */
  egress: EgressClient;
  /** The secret box for webhook URLs, created on first use. */
  secretBox(): SecretBox;
}

export const AUDIT_KINDS = {
  egressSwitched: "comms.egress.switched",
  chatWebhookSaved: "comms.chatwebhook.saved",
  chatWebhookDeleted: "comms.chatwebhook.deleted",
  chatWebhookTested: "comms.chatwebhook.tested",
} as const;

/**
 * Reads the incident as the caller: it must exist in the caller's organization and the caller
 * must be allowed to see it. Not found answers 404.
 */
export async function incidentAsCaller(deps: CommsDeps, context: HandlerContext, org: string, incidentId: string): Promise<Incident> {
  const authorization = context.requestHeader.get("authorization") ?? "";
  return deps.clients.incidents.getIncident(
    { org, id: incidentId },
    { headers: { authorization, "x-request-id": context.requestHeader.get("x-request-id") ?? "" }, signal: context.signal },
  );
}
