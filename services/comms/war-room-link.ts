import type { IncidentOpened } from "../../gen/warroom/events/v1/events_pb.js";
import { CHANNEL_KIND } from "./channel.js";
import { hasConnection } from "./chat-webhook-connection.js";
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
  if (!(await hasConnection(deps, opened.orgId))) return;
  const org = await deps.ctx.clients.identity.getOrganization({ id: opened.orgId });
  const workspaceUrl = `${deps.ctx.config.publicUrl}/o/${org.slug}/incidents/${opened.incidentId}`;
  const drafted = await deps.ctx.sql`
    insert into comms.messages (org_id, incident_id, channel, body, origin, drafted_by)
    values (${opened.orgId}, ${opened.incidentId}, ${CHANNEL_KIND}, ${warRoomLinkText(opened.title, workspaceUrl)}, 'war_room_link', ${SYSTEM_AUTHOR})
    on conflict (org_id, incident_id) where origin = 'war_room_link' do nothing
    returning id`;
  if (drafted.length > 0) deps.ctx.logger.info({ orgId: opened.orgId, incidentId: opened.incidentId, messageId: drafted[0]!.id }, "war-room link drafted");
}
