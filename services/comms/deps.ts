import type { HandlerContext } from "@connectrpc/connect";
import type { Incident } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import type { EgressClient } from "../runtime/egress/index.js";
import type { SecretBox } from "../runtime/credentials/secret-box.js";
import type { Clients } from "../runtime/transport/clients.js";
import type { Config } from "../runtime/config/config.js";
import type { Logger } from "../runtime/observability/logger.js";
import type { Outbox } from "../runtime/data/outbox.js";
import type { CommsStore } from "./store.js";

/** What the comms handlers share. */
export interface CommsDeps {
  clients: Clients;
  logger: Logger;
  config: Pick<Config, "publicUrl" | "CHAT_WEBHOOK_TIMEOUT_SECONDS">;
  store: CommsStore;
  /** Asks the outbox relay to publish soon, after a write that carries an event. */
  outbox: Pick<Outbox, "poke">;
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
  approvalChanged: "comms.approval.changed",
} as const;

/**
 * Reads the incident as the caller: it must exist in the caller's organization and the caller
 * must be allowed to see it. Not found answers 404.
 */
export async function incidentAsCaller(deps: Pick<CommsDeps, "clients">, context: HandlerContext, org: string, incidentId: string): Promise<Incident> {
  const authorization = context.requestHeader.get("authorization") ?? "";
  return deps.clients.incidents.getIncident(
    { org, id: incidentId },
    { headers: { authorization, "x-request-id": context.requestHeader.get("x-request-id") ?? "" }, signal: context.signal },
  );
}
