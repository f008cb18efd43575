import type { IncidentOpened } from "../../gen/warroom/events/v1/events_pb.js";
import { CHANNEL_KIND } from "./channel.js";
import { CONNECTION_NAME } from "./chat-webhook-connection.js";
import type { CommsDeps } from "./deps.js";

/** Who drafted an offer nobody typed. */
export const SYSTEM_AUTHOR = "warroom";
const TITLE_MAX = 120;

/** The text of the war-room link offer, the incident title cut to fit. */
export function warRoomLinkText(title: string, workspaceUrl: string): string {
  const chars = [...title];
  const shown = chars.length <= TITLE_MAX ? title : `${chars.slice(0, TITLE_MAX - 1).join("")}…`;
  return `A war room is open for "${shown}". Join it here: ${workspaceUrl}`;
}

/**
 * When a chat message opened an incident and the organization has a chat-webhook connection, the
 * war-room link is offered as a draft update. It is only drafted: a person still approves it and
 * sends it, through the same path as every other update. Redelivered events draft it once.
 */
export async function offerWarRoomLink(deps: CommsDeps, opened: IncidentOpened): Promise<void> {
  if (opened.source !== "chat") return;
  if (!(await deps.store.hasConnection(opened.orgId, CONNECTION_NAME))) return;
  const org = await deps.clients.identity.getOrganization({ id: opened.orgId });
  const workspaceUrl = `${deps.config.publicUrl}/o/${org.slug}/incidents/${opened.incidentId}`;
  const drafted = await deps.store.draftWarRoomLink({
    orgId: opened.orgId,
    incidentId: opened.incidentId,
    channel: CHANNEL_KIND,
    label: null,
    body: warRoomLinkText(opened.title, workspaceUrl),
    draftedBy: SYSTEM_AUTHOR,
  });
  if (drafted) deps.logger.info({ orgId: opened.orgId, incidentId: opened.incidentId, messageId: drafted }, "war-room link drafted");
}
